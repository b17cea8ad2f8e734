// The fuzz input as a file, for the readers that take a path (SafetensorsReader::open,
// TokenFile::open): one anonymous in-memory file (memfd) per process, rewritten for every input and
// named by /proc/self/fd/N. Nothing touches the disk and nothing is left behind.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace llcdist::fuzz {

// The path of a file holding exactly data[0, size).
inline const std::string& inputAsFile(const uint8_t* data, size_t size) {
  static const int fd = [] {
    int f = ::memfd_create("llcdist-fuzz-input", MFD_CLOEXEC);
    if (f < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    return f;
  }();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  if (::ftruncate(fd, 0) != 0 || (size && ::pwrite(fd, data, size, 0) != ssize_t(size))) {
    std::perror("writing the fuzz input to its memfd");
    std::abort();
  }
  return path;
}

}  // namespace llcdist::fuzz
