// Durable writes and checksums (FileUtil.h).
#include "llcdist/runtime/FileUtil.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>
#include <fcntl.h>
#include <unistd.h>

#include <xxhash.h>

namespace llcdist::rt {
namespace fs = std::filesystem;

uint64_t fnv1a64(const void* data, size_t size, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= uint64_t(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

StatusOr<uint64_t> fnv1a64File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::ioError("'" + path + "': cannot open it for reading");
  uint64_t h = kFnvOffset;
  static thread_local char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    h = fnv1a64(buf, size_t(in.gcount()), h);
    if (!in) break;
  }
  if (in.bad()) return Status::ioError("'" + path + "': read failed");
  return h;
}

uint64_t xxh3(const void* data, size_t size) { return XXH3_64bits(data, size); }

StatusOr<uint64_t> xxh3File(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::ioError("'" + path + "': cannot open it for reading");
  XXH3_state_t* state = XXH3_createState();
  if (!state || XXH3_64bits_reset(state) == XXH_ERROR) {
    XXH3_freeState(state);
    return Status::internal("xxhash: cannot make a hash state");
  }
  std::vector<char> buf(size_t(1) << 20);
  while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0) {
    XXH3_64bits_update(state, buf.data(), size_t(in.gcount()));
    if (!in) break;
  }
  const uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (in.bad()) return Status::ioError("'" + path + "': read failed");
  return h;
}

std::string hex16(uint64_t x) {
  char b[32];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(x));
  return b;
}

StatusOr<std::string> readFileText(const std::string& path, int64_t maxBytes) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::notFound("'" + path + "': cannot read it: " + ec.message());
  if (int64_t(size) > maxBytes)
    return Status::invalidArgument("'" + path + "': " + std::to_string(size) + " bytes, more than the " +
                                   std::to_string(maxBytes) + "-byte limit for this file");
  std::ifstream in(path, std::ios::binary);
  std::string text(size_t(size), '\0');
  if (!in.read(text.data(), std::streamsize(size))) return Status::ioError("'" + path + "': read failed");
  return text;
}

Status fsyncPath(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::ioError("'" + path + "': cannot open it to fsync: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return Status::ioError("'" + path + "': fsync failed: " + std::strerror(err));
  return Status::ok();
}

Status writeFileDurably(const std::string& path, const std::string& text) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  auto fail = [&](const std::string& what) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return Status::ioError("'" + path + "': " + what);
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return fail("cannot create the temporary file '" + tmp + "'");
    out.write(text.data(), std::streamsize(text.size()));
    out.flush();
    if (!out) return fail("write failed");
  }
  if (Status s = fsyncPath(tmp); !s.isOk()) return fail(s.message());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return fail("cannot rename '" + tmp + "' over it: " + ec.message());
  fs::path parent = fs::path(path).parent_path();
  return fsyncPath(parent.empty() ? std::string(".") : parent.string());
}

}  // namespace llcdist::rt
