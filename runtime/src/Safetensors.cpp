// safetensors reader/writer. See Safetensors.h for the format and the validation performed.
#include "llcdist/runtime/Safetensors.h"

#include "llcdist/runtime/FileUtil.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unistd.h>

namespace llcdist::rt {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr int kMaxHeaderDepth = 64;                 // a header nests three levels
struct TooDeep {};

struct DTypeEntry {
  DType dtype;
  std::string_view name;
  int64_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::kF64, "F64", 8}, {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1}, {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

const DTypeEntry& entry(DType d) {
  for (const DTypeEntry& e : kDTypes)
    if (e.dtype == d) return e;
  return kDTypes[1];  // unreachable for valid enum values
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

Status fileError(const std::string& path, Status s) { return std::move(s).withContext("file " + quote(path)); }

// numel of a shape, or nullopt on overflow of the data-size range.
std::optional<int64_t> checkedNumel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d != 0 && n > (int64_t(1) << 62) / d) return std::nullopt;
    n *= d;
  }
  return n;
}

std::string rangeString(uint64_t b, uint64_t e) {
  return "[" + std::to_string(b) + ", " + std::to_string(e) + ")";
}

// Parses one tensor entry of the header.
StatusOr<TensorInfo> parseTensor(const std::string& name, const json& j, uint64_t dataSize) {
  if (!j.is_object()) return Status::dataLoss("entry is not a JSON object");
  TensorInfo t;
  t.name = name;
  auto field = [&](const char* key) -> const json* {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const json* dtype = field("dtype");
  if (!dtype) return Status::dataLoss("missing field 'dtype'");
  if (!dtype->is_string()) return Status::dataLoss("field 'dtype' is not a string");
  const auto parsed = parseDType(dtype->get<std::string>());
  if (!parsed) return Status::dataLoss("field 'dtype': unknown dtype \"" + dtype->get<std::string>() + "\"");
  t.dtype = *parsed;

  const json* shape = field("shape");
  if (!shape) return Status::dataLoss("missing field 'shape'");
  if (!shape->is_array()) return Status::dataLoss("field 'shape' is not an array");
  for (const json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return Status::dataLoss("field 'shape' has an entry that is not a non-negative integer: " + d.dump());
    t.shape.push_back(d.get<int64_t>());
  }
  const auto numel = checkedNumel(t.shape);
  if (!numel) return Status::dataLoss("field 'shape' " + shape->dump() + " is too large");

  const json* offsets = field("data_offsets");
  if (!offsets) return Status::dataLoss("missing field 'data_offsets'");
  if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    return Status::dataLoss("field 'data_offsets' must be two non-negative integers, got " + offsets->dump());
  t.begin = (*offsets)[0].get<uint64_t>();
  t.end = (*offsets)[1].get<uint64_t>();
  if (t.begin > t.end)
    return Status::dataLoss("field 'data_offsets' " + rangeString(t.begin, t.end) + " has begin > end");
  if (t.end > dataSize)
    return Status::dataLoss("field 'data_offsets' " + rangeString(t.begin, t.end) +
                            " is out of bounds of the data section (" + std::to_string(dataSize) +
                            " bytes)");
  const uint64_t expected = uint64_t(*numel) * uint64_t(dtypeSize(t.dtype));
  if (t.byteSize() != expected)
    return Status::dataLoss("field 'data_offsets' " + rangeString(t.begin, t.end) + " spans " +
                            std::to_string(t.byteSize()) + " bytes but shape " + shape->dump() + " of " +
                            std::string(dtypeName(t.dtype)) + " needs " + std::to_string(expected));
  return t;
}

}  // namespace

int64_t dtypeSize(DType d) { return entry(d).size; }
std::string_view dtypeName(DType d) { return entry(d).name; }
std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeEntry& e : kDTypes)
    if (e.name == name) return e.dtype;
  return std::nullopt;
}

// F16 conversions after Fabian Giesen's half_to_float / float_to_half_fast3_rtne (public domain).
float halfToFloat(uint16_t h) {
  constexpr uint32_t shiftedExp = 0x7c00u << 13;
  uint32_t o = uint32_t(h & 0x7fff) << 13;
  const uint32_t exp = shiftedExp & o;
  o += (127 - 15) << 23;
  if (exp == shiftedExp) {
    o += (128 - 16) << 23;  // inf / NaN
  } else if (exp == 0) {    // zero / subnormal: renormalize
    o += 1 << 23;
    o = bitsOf(floatOf(o) - floatOf(113u << 23));
  }
  return floatOf(o | (uint32_t(h & 0x8000) << 16));
}

uint16_t floatToHalf(float f) {
  uint32_t u = bitsOf(f);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  uint16_t o;
  if (u >= (127u + 16) << 23) {  // >= 65536: inf, or NaN
    o = u > 0x7f800000u ? 0x7e00 : 0x7c00;
  } else if (u < 113u << 23) {  // subnormal or zero: let fp addition round to nearest-even
    const uint32_t magic = ((127 - 15) + (23 - 10) + 1) << 23;
    o = uint16_t(bitsOf(floatOf(u) + floatOf(magic)) - magic);
  } else {
    const uint32_t mantOdd = (u >> 13) & 1;
    u += (uint32_t(15 - 127) << 23) + 0xfff;
    u += mantOdd;
    o = uint16_t(u >> 13);  // a carry into exponent 31 gives inf, as it should
  }
  return uint16_t(o | (sign >> 16));
}

// bf16 conversions: Bf16.h (header-only, shared with the plan runtime).

int64_t TensorInfo::numel() const { return checkedNumel(shape).value_or(-1); }

StatusOr<SafetensorsReader> SafetensorsReader::open(const std::string& path) {
  std::error_code ec;
  const uint64_t fileSize = fs::file_size(path, ec);
  if (ec) return fileError(path, Status::ioError("cannot stat: " + ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return fileError(path, Status::ioError("cannot open for reading"));
  if (fileSize < 8)
    return fileError(path, Status::dataLoss("file is " + std::to_string(fileSize) +
                                            " bytes, shorter than the 8-byte header length"));
  unsigned char lenBytes[8];
  in.read(reinterpret_cast<char*>(lenBytes), 8);
  uint64_t headerLen = 0;
  for (int i = 7; i >= 0; --i) headerLen = (headerLen << 8) | lenBytes[i];
  if (headerLen > fileSize - 8)
    return fileError(path, Status::dataLoss("header length " + std::to_string(headerLen) +
                                            " runs past the end of the file (" +
                                            std::to_string(fileSize) + " bytes)"));
  if (headerLen > kMaxHeaderBytes)
    return fileError(path, Status::dataLoss("header length " + std::to_string(headerLen) +
                                            " exceeds the limit of " + std::to_string(kMaxHeaderBytes)));
  std::string header(headerLen, '\0');
  if (!in.read(header.data(), std::streamsize(headerLen)))
    return fileError(path, Status::ioError("cannot read the header"));

  std::string duplicate;
  json root;
  try {
    std::set<std::string> seen;
    root = json::parse(header, [&](int depth, json::parse_event_t event, json& parsed) {
      // A header nests three levels; far deeper is hostile (and would
      // exhaust the stack of anything recursive that touches it).
      if (depth > kMaxHeaderDepth) throw TooDeep{};
      if (event == json::parse_event_t::key && depth == 1 &&
          !seen.insert(parsed.get<std::string>()).second && duplicate.empty())
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const TooDeep&) {
    return fileError(path, Status::dataLoss("malformed JSON header: nested deeper than " +
                                            std::to_string(kMaxHeaderDepth) + " levels"));
  } catch (const json::exception& e) {
    return fileError(path, Status::dataLoss(std::string("malformed JSON header: ") + e.what()));
  }
  if (!duplicate.empty())
    return fileError(path, Status::dataLoss("duplicate tensor name " + quote(duplicate) + " in header"));
  if (!root.is_object()) return fileError(path, Status::dataLoss("header is not a JSON object"));

  SafetensorsReader r;
  r.path_ = path;
  r.dataStart_ = 8 + headerLen;
  const uint64_t dataSize = fileSize - r.dataStart_;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object())
        return fileError(path, Status::dataLoss("field '__metadata__' is not a JSON object"));
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string())
          return fileError(path, Status::dataLoss("field '__metadata__': value of " + quote(k) +
                                                  " is not a string"));
        r.metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    auto t = parseTensor(name, value, dataSize);
    if (!t.isOk()) return fileError(path, t.status().withContext("tensor " + quote(name)));
    r.tensors_.push_back(std::move(t).value());
  }
  // Overlap check: sort by byte range (ties: by size), then neighbours must not intersect.
  std::vector<const TensorInfo*> byOffset;
  for (const TensorInfo& t : r.tensors_) byOffset.push_back(&t);
  std::sort(byOffset.begin(), byOffset.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  const TensorInfo* prev = nullptr;  // the non-empty tensor reaching furthest so far
  for (const TensorInfo* t : byOffset) {
    if (t->byteSize() == 0) continue;
    if (prev && t->begin < prev->end)
      return fileError(path, Status::dataLoss("tensors " + quote(prev->name) + " " +
                                              rangeString(prev->begin, prev->end) + " and " +
                                              quote(t->name) + " " + rangeString(t->begin, t->end) +
                                              " overlap"));
    if (!prev || t->end > prev->end) prev = t;
  }
  // As the reference implementation: the tensors cover the data section
  // exactly, from its first byte to its last. A gap, bytes after the last
  // tensor (junk), or a header length short by a byte or more (every tensor
  // would be read early) is an error, not a silent misread.
  uint64_t covered = 0;
  for (const TensorInfo* t : byOffset) {
    if (t->byteSize() == 0) continue;
    if (t->begin != covered)
      return fileError(path, Status::dataLoss("tensor " + quote(t->name) + " starts at byte " +
                                              std::to_string(t->begin) + " of the data, but the "
                                              "tensors before it end at " + std::to_string(covered) +
                                              ": the data section has a gap"));
    covered = t->end;
  }
  if (covered != dataSize)
    return fileError(path, Status::dataLoss(
        "the data section is " + std::to_string(dataSize) + " bytes but its tensors cover " +
        std::to_string(covered) + ": " + std::to_string(dataSize - covered) +
        " bytes after the last tensor (trailing junk, or a header length too short)"));
  std::sort(r.tensors_.begin(), r.tensors_.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.name < b.name; });
  return r;
}

const TensorInfo* SafetensorsReader::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

Status SafetensorsReader::readBytes(const TensorInfo& t, uint64_t offset, uint64_t size, void* dst) const {
  if (offset > t.byteSize() || size > t.byteSize() - offset)
    return fileError(path_, Status::outOfRange("tensor " + quote(t.name) + ": byte range " +
                                               rangeString(offset, offset + size) + " is outside its " +
                                               std::to_string(t.byteSize()) + " bytes"));
  if (size == 0) return Status::ok();
  std::ifstream in(path_, std::ios::binary);
  in.seekg(std::streamoff(dataStart_ + t.begin + offset));
  if (!in || !in.read(static_cast<char*>(dst), std::streamsize(size)))
    return fileError(path_, Status::ioError("tensor " + quote(t.name) + ": read failed"));
  return Status::ok();
}

Status SafetensorsReader::readF32(std::string_view name, float* dst, int64_t count) const {
  const TensorInfo* t = find(name);
  if (!t) return fileError(path_, Status::notFound("no tensor " + quote(name)));
  const auto context = [&](Status s) { return fileError(path_, std::move(s).withContext("tensor " + quote(name))); };
  if (count != t->numel())
    return context(Status::invalidArgument("destination holds " + std::to_string(count) +
                                           " floats but the tensor has " + std::to_string(t->numel())));
  const int64_t n = t->numel();
  switch (t->dtype) {
  case DType::kF32: return readBytes(*t, 0, t->byteSize(), dst);
  case DType::kF16:
  case DType::kBF16: {
    std::vector<uint16_t> raw(n);
    LLCDIST_RETURN_IF_ERROR(readBytes(*t, 0, t->byteSize(), raw.data()));
    for (int64_t i = 0; i < n; ++i)
      dst[i] = t->dtype == DType::kF16 ? halfToFloat(raw[i]) : bf16ToFloat(raw[i]);
    return Status::ok();
  }
  case DType::kF64: {
    std::vector<double> raw(n);
    LLCDIST_RETURN_IF_ERROR(readBytes(*t, 0, t->byteSize(), raw.data()));
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(raw[i]);
    return Status::ok();
  }
  default:
    return context(Status::invalidArgument("dtype " + std::string(dtypeName(t->dtype)) +
                                           " is not a floating-point type"));
  }
}

StatusOr<std::vector<float>> SafetensorsReader::readF32(std::string_view name) const {
  const TensorInfo* t = find(name);
  if (!t) return fileError(path_, Status::notFound("no tensor " + quote(name)));
  std::vector<float> out(t->numel());
  LLCDIST_RETURN_IF_ERROR(readF32(name, out.data(), int64_t(out.size())));
  return out;
}

Status writeSafetensors(const std::string& path, std::vector<TensorToWrite> tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorToWrite& a, const TensorToWrite& b) { return a.name < b.name; });
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& t = tensors[i];
    const auto context = [&](Status s) {
      return fileError(path, std::move(s).withContext("tensor " + quote(t.name)));
    };
    if (t.name.empty() || t.name == "__metadata__")
      return context(Status::invalidArgument("invalid tensor name"));
    if (i > 0 && tensors[i - 1].name == t.name) return context(Status::invalidArgument("duplicate tensor name"));
    for (int64_t d : t.shape)
      if (d < 0) return context(Status::invalidArgument("negative dimension in shape"));
    const auto numel = checkedNumel(t.shape);
    if (!numel) return context(Status::invalidArgument("shape is too large"));
    const uint64_t bytes = uint64_t(*numel) * uint64_t(dtypeSize(t.dtype));
    if (bytes > 0 && !t.data) return context(Status::invalidArgument("null data"));
    header[t.name] = {{"dtype", std::string(dtypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    sizes.push_back(bytes);
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');

  static std::atomic<uint64_t> counter{0};  // unique temp names (ranks may write concurrently)
  const std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  auto fail = [&](const std::string& what) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    return fileError(path, Status::ioError(what));
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return fail("cannot create temporary file " + quote(tmp));
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (size_t i = 0; i < tensors.size(); ++i)
      if (sizes[i] > 0) out.write(static_cast<const char*>(tensors[i].data), std::streamsize(sizes[i]));
    out.flush();
    if (!out) return fail("write failed");
  }
  // Durable: the bytes reach the disk before the rename makes them the file, and the rename before
  // the call returns (a checkpoint's commit relies on both; FileUtil.h).
  if (Status s = fsyncPath(tmp); !s.isOk()) return fail(s.message());
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return fail("cannot rename " + quote(tmp) + " to the destination: " + ec.message());
  const fs::path parent = fs::path(path).parent_path();
  return fileError(path, fsyncPath(parent.empty() ? std::string(".") : parent.string()));
}

}  // namespace llcdist::rt
