//===- AddingAModelDocTest.cpp - docs/adding-a-model.md stays true --------===//
//
// Every file docs/adding-a-model.md names exists, and every family the
// frontend knows (Arch) has what the page says a family needs: a tiny config
// in models/ that loads as that family (and is a seed of the config
// fuzzer), a test in test/reference/ naming its transformers class, and a
// place in the README's list of classes.
//
//===----------------------------------------------------------------------===//
#include "llcdist/Frontend/ModelConfig.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

using namespace llcdist;
namespace fs = std::filesystem;

namespace {
const fs::path kRoot = LLCDIST_SOURCE_DIR;

std::string read(const fs::path &p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(AddingAModelDoc, EveryFileThePageNamesExists) {
  const std::string page = read(kRoot / "docs/adding-a-model.md");
  ASSERT_FALSE(page.empty()) << "docs/adding-a-model.md is missing";
  const std::regex path(R"(`((?:include|lib|unittests|test|scripts|models|docs)/[A-Za-z0-9_./-]+\.[a-z]+)`)");
  int named = 0;
  for (auto it = std::sregex_iterator(page.begin(), page.end(), path); it != std::sregex_iterator(); ++it) {
    const std::string p = (*it)[1];
    if (p.find("-X.") != std::string::npos || p.find("tiny-X") != std::string::npos) // the page's placeholders
      continue;
    ++named;
    EXPECT_TRUE(fs::exists(kRoot / p)) << "docs/adding-a-model.md names " << p << ", which does not exist";
  }
  EXPECT_GT(named, 15);
}

TEST(AddingAModelDoc, EveryFamilyHasATinyModelAReferenceTestAndAReadmeLine) {
  const std::string readme = read(kRoot / "README.md");
  std::vector<std::string> references;
  for (const auto &e : fs::directory_iterator(kRoot / "test/reference"))
    if (e.path().extension() == ".test")
      references.push_back(read(e.path()));
  for (int i = 0; i < kNumArchs; ++i) {
    const Arch arch = Arch(i);
    const std::string cls = hfArchitecture(arch);
    bool tiny = false, seed = false;
    for (const auto &e : fs::directory_iterator(kRoot / "models")) {
      const std::string name = e.path().filename().string();
      if (name.rfind("tiny-", 0) != 0)
        continue;
      ModelConfig c;
      if (!loadModelConfig(e.path().string(), c) && c.arch == arch) {
        tiny = true;
        seed |= fs::exists(kRoot / "fuzz/corpus/model_config" / name);
      }
    }
    EXPECT_TRUE(tiny) << cls << " (" << archName(arch) << ") has no models/tiny-*.json: add one for its tests";
    EXPECT_TRUE(seed) << cls
                      << "'s tiny model is not a seed of the config fuzzer: copy it to fuzz/corpus/model_config/";
    EXPECT_TRUE(std::any_of(references.begin(), references.end(),
                            [&](const std::string &t) { return t.find(cls) != std::string::npos; }))
        << cls << " is named by no test/reference/*.test: check it against transformers' own class";
    EXPECT_NE(readme.find("`" + cls + "`"), std::string::npos) << cls << " is missing from the README's list";
  }
}
} // namespace
