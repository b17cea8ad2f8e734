#include "llcdist/runtime/Safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace llcdist::rt {
namespace {
namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("llcdist_st_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
           "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  std::string writeRaw(const std::string& name, const std::string& bytes) {
    const std::string p = (dir / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  // A file with the given JSON header (exact text) and `dataBytes` zero bytes of data.
  std::string writeWithHeader(const std::string& name, const std::string& header, size_t dataBytes) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = char(uint64_t(header.size()) >> (8 * i));
    return writeRaw(name, bytes + header + std::string(dataBytes, '\0'));
  }
  // Expect open() to fail with kDataLoss and a message containing every fragment and the file name.
  void expectError(const std::string& path, std::initializer_list<std::string> fragments) {
    auto r = SafetensorsReader::open(path);
    ASSERT_FALSE(r.isOk()) << path;
    const std::string& msg = r.status().message();
    EXPECT_NE(msg.find("file '" + path + "'"), std::string::npos) << msg;
    for (const std::string& f : fragments) EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
  static std::string readAll(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
  }
};

TEST_F(SafetensorsTest, RoundTripIsBitwiseAndDeterministic) {
  std::vector<float> f32 = {1.5f, -0.0f, std::nanf(""), 3.25e-38f, 1e30f, 7.0f};
  std::vector<uint16_t> f16 = {floatToHalf(1.0f), floatToHalf(-2.5f), floatToHalf(65504.0f)};
  std::vector<uint16_t> bf16 = {floatToBf16(3.0f), floatToBf16(-1e-3f)};
  std::vector<int32_t> i32 = {1, -2, 2147483647, 0};
  std::vector<int64_t> i64 = {-(int64_t(1) << 40)};
  float scalar = 42.0f;
  std::vector<TensorToWrite> tensors = {
      {"w.f32", DType::kF32, {2, 3}, f32.data()}, {"a.f16", DType::kF16, {3}, f16.data()},
      {"b.bf16", DType::kBF16, {1, 2}, bf16.data()}, {"ids", DType::kI32, {4}, i32.data()},
      {"big", DType::kI64, {1}, i64.data()}, {"scalar", DType::kF32, {}, &scalar},
      {"empty", DType::kF32, {0, 5}, nullptr}};
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
  const std::string p = (dir / "model.safetensors").string();
  ASSERT_TRUE(writeSafetensors(p, tensors, meta).isOk());

  auto r = SafetensorsReader::open(p);
  ASSERT_TRUE(r.isOk()) << r.status().message();
  EXPECT_EQ(r->metadata(), meta);
  ASSERT_EQ(r->tensors().size(), tensors.size());
  for (size_t i = 1; i < r->tensors().size(); ++i) EXPECT_LT(r->tensors()[i - 1].name, r->tensors()[i].name);
  for (const TensorToWrite& t : tensors) {
    const TensorInfo* info = r->find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, t.dtype);
    EXPECT_EQ(info->shape, t.shape);
    std::vector<char> got(info->byteSize());
    ASSERT_TRUE(r->readBytes(*info, 0, got.size(), got.data()).isOk());
    if (!got.empty()) {
      EXPECT_EQ(std::memcmp(got.data(), t.data, got.size()), 0) << t.name;
    }
  }
  EXPECT_EQ(r->find("missing"), nullptr);

  // The header is padded to a multiple of 8, and the order of the input does not matter.
  const std::string bytes = readAll(p);
  uint64_t headerLen = 0;
  std::memcpy(&headerLen, bytes.data(), 8);
  EXPECT_EQ(headerLen % 8, 0u);
  std::reverse(tensors.begin(), tensors.end());
  const std::string p2 = (dir / "again.safetensors").string();
  ASSERT_TRUE(writeSafetensors(p2, tensors, meta).isOk());
  EXPECT_EQ(readAll(p2), bytes);

  // fp32 conversion on read.
  auto a = r->readF32("a.f16");
  ASSERT_TRUE(a.isOk());
  EXPECT_EQ(*a, (std::vector<float>{1.0f, -2.5f, 65504.0f}));
  auto b = r->readF32("b.bf16");
  ASSERT_TRUE(b.isOk());
  EXPECT_EQ((*b)[0], 3.0f);
  EXPECT_NEAR((*b)[1], -1e-3f, 1e-5f);
  EXPECT_EQ(r->readF32("ids").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->readF32("nope").status().code(), StatusCode::kNotFound);
  std::vector<float> tooSmall(5);
  EXPECT_FALSE(r->readF32("w.f32", tooSmall.data(), 5).isOk());
  // A slice of a tensor (what a tensor-parallel rank reads).
  float row[3];
  ASSERT_TRUE(r->readBytes(*r->find("w.f32"), 12, 12, row).isOk());
  EXPECT_EQ(row[1], 1e30f);
  EXPECT_EQ(r->readBytes(*r->find("w.f32"), 16, 12, row).code(), StatusCode::kOutOfRange);
}

TEST_F(SafetensorsTest, WriterFailuresLeaveNoFile) {
  float x = 1.0f;
  const std::string p = (dir / "out.safetensors").string();
  Status dup = writeSafetensors(p, {{"a", DType::kF32, {1}, &x}, {"a", DType::kF32, {1}, &x}});
  EXPECT_FALSE(dup.isOk());
  EXPECT_NE(dup.message().find("tensor 'a': duplicate"), std::string::npos) << dup.message();
  EXPECT_FALSE(writeSafetensors(p, {{"n", DType::kF32, {-1}, &x}}).isOk());
  EXPECT_FALSE(writeSafetensors(p, {{"n", DType::kF32, {2}, nullptr}}).isOk());
  const std::string noDir = (dir / "no" / "such" / "dir.safetensors").string();
  Status io = writeSafetensors(noDir, {{"a", DType::kF32, {1}, &x}});
  EXPECT_EQ(io.code(), StatusCode::kIoError);
  EXPECT_TRUE(fs::is_empty(dir)) << "no output and no temporary file may be left behind";
}

TEST_F(SafetensorsTest, MalformedFilesAreRejectedWithContext) {
  const std::string ok = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expectError(writeRaw("short", "abc"), {"3 bytes, shorter than the 8-byte header length"});
  expectError(writeRaw("pastend", std::string("\x40\0\0\0\0\0\0\0{}", 10)),
              {"header length 64 runs past the end of the file (10 bytes)"});
  expectError(writeWithHeader("badjson", "{\"t\": {", 0), {"malformed JSON header"});
  expectError(writeWithHeader("notobj", "[1, 2]", 0), {"header is not a JSON object"});
  expectError(writeWithHeader("nodtype", R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8),
              {"tensor 't'", "missing field 'dtype'"});
  expectError(writeWithHeader("noshape", R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8),
              {"tensor 't'", "missing field 'shape'"});
  expectError(writeWithHeader("nooffsets", R"({"t":{"dtype":"F32","shape":[2]}})", 8),
              {"tensor 't'", "missing field 'data_offsets'"});
  expectError(writeWithHeader("baddtype", R"({"t":{"dtype":"F8","shape":[2],"data_offsets":[0,8]}})", 8),
              {"tensor 't'", "unknown dtype \"F8\""});
  expectError(writeWithHeader("negshape", R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
              {"tensor 't'", "field 'shape'"});
  expectError(writeWithHeader("oob", "{" + ok + "}", 4),
              {"tensor 't'", "[0, 8) is out of bounds of the data section (4 bytes)"});
  expectError(writeWithHeader("reversed", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
              {"tensor 't'", "begin > end"});
  expectError(writeWithHeader("size", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 12),
              {"tensor 't'", "spans 8 bytes but shape [3] of F32 needs 12"});
  expectError(writeWithHeader("overlap",
                              "{" + ok + R"(,"u":{"dtype":"I32","shape":[2],"data_offsets":[4,12]}})", 12),
              {"tensors 't' [0, 8) and 'u' [4, 12) overlap"});
  expectError(writeWithHeader("dup", "{" + ok + "," + ok + "}", 8), {"duplicate tensor name 't'"});
  expectError(writeWithHeader("meta", R"({"__metadata__":{"a":1}})", 0),
              {"field '__metadata__': value of 'a' is not a string"});
  // The data section must be covered exactly (as the reference implementation
  // requires): a gap between tensors, bytes after the last one (junk), and a
  // header length one byte short of a header ending in padding (which would
  // read every tensor a byte early) are errors, not silent misreads.
  expectError(writeWithHeader("gap",
                              "{" + ok + R"(,"u":{"dtype":"I32","shape":[1],"data_offsets":[12,16]}})", 16),
              {"tensor 'u' starts at byte 12 of the data", "the data section has a gap"});
  expectError(writeWithHeader("junk", "{" + ok + "}", 9),
              {"the data section is 9 bytes but its tensors cover 8", "trailing junk"});
  {
    std::string header = "{" + ok + "}   "; // padded with spaces, as writers do
    std::string bytes(8, '\0');
    uint64_t shortLen = header.size() - 1; // one byte short: the last pad becomes data
    for (int i = 0; i < 8; ++i) bytes[i] = char(shortLen >> (8 * i));
    expectError(writeRaw("shortheader", bytes + header + std::string(8, '\0')),
                {"the data section is 9 bytes but its tensors cover 8", "header length too short"});
  }
  expectError(writeWithHeader("deep", "{\"__metadata__\": " + std::string(100000, '[') +
                                          std::string(100000, ']') + "}", 0),
              {"malformed JSON header: nested deeper than 64 levels"});
  auto missing = SafetensorsReader::open((dir / "does_not_exist").string());
  EXPECT_EQ(missing.status().code(), StatusCode::kIoError);

  // Sanity: the same header without the defect parses (so the checks above test what they claim).
  auto good = SafetensorsReader::open(writeWithHeader("good", "{" + ok + "}", 8));
  ASSERT_TRUE(good.isOk()) << good.status().message();
  EXPECT_EQ(good->tensors().size(), 1u);
}

TEST(HalfTest, AllHalfAndBf16ValuesRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = halfToFloat(uint16_t(h));
    const float b = bf16ToFloat(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
    } else {
      ASSERT_EQ(floatToHalf(f), h) << std::hex << h;
    }
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(b))));
    } else {
      ASSERT_EQ(floatToBf16(b), h) << std::hex << h;
    }
  }
  EXPECT_EQ(halfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(floatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie -> even
  EXPECT_EQ(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(floatToHalf(65519.0f), 0x7bff);  // rounds down to 65504
  EXPECT_EQ(floatToHalf(65520.0f), 0x7c00);  // rounds up to inf
  EXPECT_EQ(floatToHalf(-1e10f), 0xfc00);
  EXPECT_EQ(floatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie -> even
  EXPECT_EQ(floatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

}  // namespace
}  // namespace llcdist::rt
