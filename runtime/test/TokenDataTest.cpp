#include "llcdist/runtime/TokenData.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

namespace llcdist::rt {
namespace {
namespace fs = std::filesystem;

class TokenDataTest : public ::testing::Test {
protected:
  fs::path dir;
  void SetUp() override {
    dir = fs::temp_directory_path() /
          ("llcdist_tok_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) +
           "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  // A file whose token at position p is p (so a sample's first input names its start).
  std::shared_ptr<const TokenFile> positions(int64_t n) {
    std::vector<uint16_t> t(n);
    std::iota(t.begin(), t.end(), uint16_t(0));
    const std::string p = (dir / "pos.bin").string();
    EXPECT_TRUE(writeTokenFile(p, t.data(), n).isOk());
    auto f = TokenFile::open(p);
    EXPECT_TRUE(f.isOk()) << f.status().message();
    return std::make_shared<const TokenFile>(std::move(f).value());
  }
  // Start tokens of the global batch of `step`, ordered by g, assembled from every (micro, rank).
  static std::vector<int64_t> globalBatchStarts(const BatchSampler& s, int64_t step) {
    const BatchConfig& c = s.config();
    std::vector<int64_t> starts(s.globalBatch(), -1);
    std::vector<int32_t> in(c.B * c.T), tg(c.B * c.T);
    for (int64_t j = 0; j < c.microbatches; ++j)
      for (int64_t r = 0; r < c.dp; ++r) {
        EXPECT_TRUE(s.microbatch(step, j, r, in.data(), tg.data()).isOk());
        for (int64_t i = 0; i < c.B; ++i) {
          for (int64_t t = 0; t + 1 < c.T; ++t) EXPECT_EQ(tg[i * c.T + t], in[i * c.T + t + 1]);
          starts[(j * c.dp + r) * c.B + i] = in[i * c.T];
        }
      }
    return starts;
  }
  std::string writeRaw(const std::string& name, const std::vector<int32_t>& header, size_t tokenBytes) {
    const std::string p = (dir / name).string();
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), std::streamsize(header.size() * 4));
    out << std::string(tokenBytes, '\0');
    return p;
  }
  static std::vector<int32_t> header(int32_t magic, int32_t version, int32_t count) {
    std::vector<int32_t> h(256, 0);
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    return h;
  }
  static void expectError(const std::string& path, const std::string& fragment) {
    auto f = TokenFile::open(path);
    ASSERT_FALSE(f.isOk());
    EXPECT_NE(f.status().message().find("file '" + path + "'"), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find(fragment), std::string::npos) << f.status().message();
  }
};

TEST_F(TokenDataTest, WriteReadRoundTrip) {
  std::vector<uint16_t> t = {0, 1, 255, 256, 65535, 42};
  const std::string p = (dir / "t.bin").string();
  ASSERT_TRUE(writeTokenFile(p, t.data(), int64_t(t.size())).isOk());
  EXPECT_EQ(fs::file_size(p), 1024u + 2 * t.size());
  auto f = TokenFile::open(p);
  ASSERT_TRUE(f.isOk()) << f.status().message();
  EXPECT_EQ(f->tokens(), std::vector<uint32_t>(t.begin(), t.end()));
  EXPECT_EQ(f->size(), 6);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);  // no temp left
}

// Version 2: uint32 tokens, for vocabularies past 65,536 ids (Qwen2's 151,936), sampled as version 1's.
TEST_F(TokenDataTest, WideTokensRoundTripAndSample) {
  std::vector<uint32_t> t(40);
  for (size_t i = 0; i < t.size(); ++i) t[i] = uint32_t(151000 + i);
  t[3] = 65536;
  const std::string p = (dir / "wide.bin").string();
  ASSERT_TRUE(writeTokenFile(p, t.data(), int64_t(t.size())).isOk());
  EXPECT_EQ(fs::file_size(p), 1024u + 4 * t.size());
  auto f = TokenFile::open(p);
  ASSERT_TRUE(f.isOk()) << f.status().message();
  EXPECT_EQ(f->tokens(), t);
  auto s = BatchSampler::create(std::make_shared<const TokenFile>(std::move(f).value()), {2, 8, 1, 1});
  ASSERT_TRUE(s.isOk());
  std::vector<int32_t> in(16), tg(16);
  ASSERT_TRUE(s->microbatch(0, 0, 0, in.data(), tg.data()).isOk());
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(uint32_t(in[i]), t[i]) << i;
    EXPECT_EQ(uint32_t(tg[i]), t[i + 1]) << i;
  }
}

TEST_F(TokenDataTest, SequentialOrderIsLlmcAndIndependentOfBMdp) {
  auto file = positions(1000);
  const int64_t T = 8;
  const std::vector<BatchConfig> configs = {
      {4, T, 1, 1}, {1, T, 2, 2}, {2, T, 2, 1}, {1, T, 1, 4}, {2, T, 1, 2}};
  for (int64_t step : {0, 1, 5}) {
    std::vector<int64_t> expected(4);
    for (int64_t g = 0; g < 4; ++g) expected[g] = (step * 4 + g) * T;
    for (const BatchConfig& c : configs) {
      auto s = BatchSampler::create(file, c);
      ASSERT_TRUE(s.isOk());
      EXPECT_EQ(globalBatchStarts(*s, step), expected)
          << "B=" << c.B << " M=" << c.microbatches << " dp=" << c.dp << " step=" << step;
    }
  }
  // Microbatch j of rank r holds g = (j·dp + r)·B + i: with B=2, M=2, dp=2, (j=0, r=1) holds g = 2, 3.
  auto s = BatchSampler::create(file, {2, T, 2, 2});
  ASSERT_TRUE(s.isOk());
  std::vector<int32_t> in(2 * T), tg(2 * T);
  ASSERT_TRUE(s->microbatch(3, 0, 1, in.data(), tg.data()).isOk());
  EXPECT_EQ(in[0], (3 * 8 + 2) * T);
  EXPECT_EQ(in[T], (3 * 8 + 3) * T);
  EXPECT_EQ(tg[T - 1], (3 * 8 + 2) * T + T);  // the target of the last input is token start+T
  EXPECT_EQ(s->microbatch(0, 2, 0, in.data(), tg.data()).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s->microbatch(0, 0, 2, in.data(), tg.data()).code(), StatusCode::kOutOfRange);
}

TEST_F(TokenDataTest, WrapsAroundAtTheEndOfTheFile) {
  auto file = positions(19);  // T = 4: Ns = floor(18 / 4) = 4 samples, starts 0, 4, 8, 12
  auto s = BatchSampler::create(file, {3, 4, 1, 1});
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(s->samplesPerEpoch(), 4);
  EXPECT_EQ(globalBatchStarts(*s, 0), (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(globalBatchStarts(*s, 1), (std::vector<int64_t>{12, 0, 4}));
  EXPECT_EQ(globalBatchStarts(*s, 2), (std::vector<int64_t>{8, 12, 0}));
  // The last sample's targets end exactly at token Ns·T = 16 <= count - 1.
  std::vector<int32_t> in(12), tg(12);
  ASSERT_TRUE(s->microbatch(1, 0, 0, in.data(), tg.data()).isOk());
  EXPECT_EQ(tg[3], 16);
}

TEST_F(TokenDataTest, ShuffleIsASeededPermutationPerEpoch) {
  for (int64_t n : {1, 2, 3, 5, 17, 100, 1000}) {
    std::set<int64_t> seen;
    for (int64_t p = 0; p < n; ++p) seen.insert(shufflePermute(9, 3, p, n));
    EXPECT_EQ(int64_t(seen.size()), n);
    EXPECT_EQ(*seen.begin(), 0);
    EXPECT_EQ(*seen.rbegin(), n - 1);
  }
  auto file = positions(4001);  // T = 10: Ns = 400
  BatchConfig c{4, 10, 2, 2, true, 1234};
  auto a = BatchSampler::create(file, c);
  auto b = BatchSampler::create(file, c);
  c.seed = 1235;
  auto other = BatchSampler::create(file, c);
  ASSERT_TRUE(a.isOk() && b.isOk() && other.isOk());
  std::vector<int64_t> epoch0, epoch1, otherSeed;
  for (int64_t s = 0; s < 400; ++s) {
    epoch0.push_back(a->sampleStart(s));
    epoch1.push_back(a->sampleStart(400 + s));
    otherSeed.push_back(other->sampleStart(s));
    EXPECT_EQ(b->sampleStart(s), epoch0.back());  // deterministic
  }
  EXPECT_NE(epoch0, epoch1);
  EXPECT_NE(epoch0, otherSeed);
  std::vector<int64_t> sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t s = 0; s < 400; ++s) ASSERT_EQ(sorted[s], s * 10);  // a permutation of the starts
  sorted = epoch1;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t s = 0; s < 400; ++s) ASSERT_EQ(sorted[s], s * 10);

  // Shuffled order is still independent of how G is split into (B, M, dp).
  auto single = BatchSampler::create(file, {16, 10, 1, 1, true, 1234});
  ASSERT_TRUE(single.isOk());
  for (int64_t step : {0, 7, 30})
    EXPECT_EQ(globalBatchStarts(*single, step), globalBatchStarts(*a, step));
}

TEST_F(TokenDataTest, MalformedFilesAreRejected) {
  expectError(writeRaw("short", std::vector<int32_t>(10, 0), 0), "40 bytes, shorter than the 1024-byte header");
  expectError(writeRaw("magic", header(12345, 1, 0), 0), "bad magic 12345 (expected 20240520)");
  expectError(writeRaw("version", header(kTokenFileMagic, 3, 0), 0),
              "unsupported version 3 (expected 1: uint16 tokens, or 2: uint32 tokens)");
  expectError(writeRaw("wide-count", header(kTokenFileMagic, 2, 5), 10),
              "header says 5 tokens (20 bytes) but the file has 10 bytes of tokens");
  expectError(writeRaw("count", header(kTokenFileMagic, 1, 5), 8),
              "header says 5 tokens (10 bytes) but the file has 8 bytes of tokens");
  expectError(writeRaw("negative", header(kTokenFileMagic, 1, -1), 0), "header says -1 tokens");
  EXPECT_EQ(TokenFile::open((dir / "missing").string()).status().code(), StatusCode::kIoError);

  auto few = positions(8);
  auto s = BatchSampler::create(few, {1, 8, 1, 1});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.status().message().find("pos.bin': 8 tokens are too few for one sample of T+1 = 9"),
            std::string::npos)
      << s.status().message();
  EXPECT_TRUE(BatchSampler::create(few, {1, 7, 1, 1}).isOk());
  EXPECT_EQ(BatchSampler::create(few, {0, 7, 1, 1}).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShippedCorpusTest, TrainAndValFilesAreValidByteTokens) {
  const std::string dataDir = LLCDIST_DATA_DIR;
  if (!fs::exists(dataDir + "/corpus_train.bin")) GTEST_SKIP() << "no shipped corpus in " << dataDir;
  for (const char* name : {"/corpus_train.bin", "/corpus_val.bin"}) {
    auto f = TokenFile::open(dataDir + name);
    ASSERT_TRUE(f.isOk()) << f.status().message();
    EXPECT_GT(f->size(), 10000);
    EXPECT_LT(*std::max_element(f->tokens().begin(), f->tokens().end()), 256);
    auto s = BatchSampler::create(std::make_shared<const TokenFile>(std::move(f).value()), {4, 64, 1, 1});
    EXPECT_TRUE(s.isOk());
  }
}

}  // namespace
}  // namespace llcdist::rt
