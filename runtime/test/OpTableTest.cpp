// The per-op tables: every op kind of the schema has a core definition (family, checker, binder) and,
// when it runs as a kernel, exactly one CPU kernel-table entry; KernelTable::check names what is
// wrong; a kernel refuses a call bound with another family's parameters; the binders give a rank its
// groups, slices and peers; and docs/adding-an-op.md lists every op under its family and names only
// files that exist.
#include "llcdist/runtime/CpuBackend.h"
#include "llcdist/runtime/KernelTable.h"
#include "llcdist/runtime/PlanSchema.h"

#include "ops/OpDefs.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace llcdist::rt {
namespace {

namespace sc = schema;

TEST(OpTableTest, EveryOpKindHasADefinition) {
  Status s = ops::checkOpDefs();
  ASSERT_TRUE(s.isOk()) << s.message();
  for (const sc::OpSpec& spec : sc::kOpSpecs) {
    const ops::OpDef* d = ops::opDefs().find(spec.kind);
    ASSERT_NE(d, nullptr) << spec.name;
    EXPECT_FALSE(d->family.empty()) << spec.name;
    EXPECT_NE(d->check, nullptr) << spec.name;
    EXPECT_NE(d->bind, nullptr) << spec.name;
  }
}

// A role exempt from `accumulate` (ArgSpec::governedByAccumulate false) is a read-written role of an op
// that has the attr: the flag means something only there. Today: the classifier's loss only.
TEST(OpTableTest, RolesExemptFromAccumulateAreReadWrittenRolesOfAccumulatingOps) {
  std::vector<std::string> exempt;
  for (const sc::OpSpec& spec : sc::kOpSpecs)
    for (size_t r = 0; r < spec.numArgs; ++r) {
      if (spec.args[r].governedByAccumulate) continue;
      exempt.push_back(std::string(spec.name) + "." + std::string(spec.args[r].role));
      EXPECT_EQ(spec.args[r].access, sc::ArgAccess::kReadWrite) << exempt.back();
      bool hasAccumulate = false;
      for (size_t a = 0; a < spec.numAttrs; ++a) hasAccumulate |= spec.attrs[a].name == "accumulate";
      EXPECT_TRUE(hasAccumulate) << exempt.back();
      EXPECT_EQ(sc::effectiveAccess(spec.kind, r, false), sc::ArgAccess::kReadWrite) << exempt.back();
    }
  EXPECT_EQ(exempt, std::vector<std::string>{"classifier.loss"});
  const size_t dw = size_t(sc::argIndex(sc::OpKind::kClassifier, "dw"));
  EXPECT_EQ(sc::effectiveAccess(sc::OpKind::kClassifier, dw, false), sc::ArgAccess::kWrite);
}

TEST(OpTableTest, CpuKernelTableHoldsExactlyTheKernelOps) {
  Status s = checkCpuKernelTable();
  ASSERT_TRUE(s.isOk()) << s.message();
  size_t kernels = 0;
  for (const sc::OpSpec& spec : sc::kOpSpecs) {
    EXPECT_EQ(cpuKernelTable().find(spec.kind) != nullptr, launchesKernel(spec.kind)) << spec.name;
    kernels += launchesKernel(spec.kind);
  }
  // Not a tautology: the collectives (all_to_all and all_to_all_v included), send / recv, load_microbatch
  // and wait are the only non-kernel ops.
  EXPECT_EQ(kernels, sc::kNumOpKinds - 9);
  auto backend = makeCpuBackend();
  EXPECT_TRUE(backend->hasKernel(sc::OpKind::kLayerNormFwd));
  EXPECT_FALSE(backend->hasKernel(sc::OpKind::kAllReduce));
}

TEST(OpTableTest, CheckNamesMissingUnexpectedAndDuplicateEntries) {
  KernelTable<int> t("a test table");
  for (size_t i = 0; i < sc::kNumOpKinds; ++i)
    if (sc::OpKind(i) != sc::OpKind::kRopeFwd) t.add(sc::OpKind(i), int(i));
  t.add(sc::OpKind::kAdd, 7);
  EXPECT_EQ(*t.find(sc::OpKind::kAdd), 7);
  EXPECT_EQ(t.find(sc::OpKind::kRopeFwd), nullptr);
  const Status all = t.check();
  EXPECT_EQ(all.code(), StatusCode::kInternal);
  EXPECT_EQ(all.message(), "a test table: no entry for: rope_fwd; registered twice: add (docs/adding-an-op.md)");
  const Status kernels = t.check(launchesKernel);
  EXPECT_NE(kernels.message().find("an entry for the non-kernel op: load_microbatch all_reduce all_gather "
                                   "reduce_scatter send recv"),
            std::string::npos)
      << kernels.message();
  KernelTable<int> complete("complete");
  for (size_t i = 0; i < sc::kNumOpKinds; ++i) complete.add(sc::OpKind(i), 0);
  EXPECT_TRUE(complete.check().isOk());
}

TEST(OpTableTest, KernelRefusesAnotherFamilysParameters) {
  float a[2] = {1, 2}, b[2] = {3, 4}, y[2] = {0, 0};
  KernelCall c;
  c.kind = sc::OpKind::kAdd;
  c.args = {{a}, {b}, {y}};
  c.argElems = {{2}, {2}, {2}};
  c.params = NormParams{};
  Status s = runCpuKernel(c);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "add was bound without its family's parameters");
  c.params = ElementwiseParams{2};
  ASSERT_TRUE(runCpuKernel(c).isOk());
  EXPECT_EQ(y[0], 4.0f);
  EXPECT_EQ(y[1], 6.0f);
  c.kind = sc::OpKind::kAllReduce;
  c.args = {{a}};
  c.argElems = {{2}};
  EXPECT_EQ(runCpuKernel(c).message(), "all_reduce is a collective, run by the backend's communicator, not a kernel");
}

// The binders, directly: the family's parameters for a rank of a dp=2 × tp=4 mesh (Megatron order:
// tp fastest, so rank 6 is dp 1, tp 2).
StatusOr<OpParams> bindFor(sc::OpKind kind, std::map<std::string, AttrValue> attrs, int rank) {
  Manifest m;
  m.meshDp = 2;
  m.meshTp = 4;
  Op op;
  op.kind = kind;
  op.attrs = std::move(attrs);
  return ops::opDefs().find(kind)->bind(ops::BindContext{op, m, m.mesh(), rank});
}

TEST(OpBinderTest, CommunicationGroupsTotalsAndPeers) {
  auto ar = bindFor(sc::OpKind::kAllReduce,
                    {{"axis", std::string("tp")}, {"op", std::string("avg")}, {"group_size", int64_t(2)}}, 6);
  ASSERT_TRUE(ar.isOk()) << ar.status().message();
  const auto& p = std::get<CommunicationParams>(*ar);
  EXPECT_EQ(p.group, (std::vector<int>{6, 7}));  // the sub-group of 2 consecutive tp members holding rank 6
  EXPECT_EQ(p.reduceOp, ReduceOp::kAvg);

  auto ag =
      bindFor(sc::OpKind::kAllGather, {{"axis", std::string("dp")}, {"outer", int64_t(3)}, {"inner", int64_t(5)}}, 6);
  ASSERT_TRUE(ag.isOk());
  EXPECT_EQ(std::get<CommunicationParams>(*ag).group, (std::vector<int>{2, 6}));
  EXPECT_EQ(std::get<CommunicationParams>(*ag).total, 10);  // n·inner without attr total

  auto send = bindFor(sc::OpKind::kSend, {{"axis", std::string("tp")}, {"peer", int64_t(0)}, {"tag", int64_t(9)}}, 6);
  ASSERT_TRUE(send.isOk());
  EXPECT_EQ(std::get<CommunicationParams>(*send).peer, 4);
  EXPECT_EQ(std::get<CommunicationParams>(*send).tag, 9);
  auto self = bindFor(sc::OpKind::kRecv, {{"axis", std::string("tp")}, {"peer", int64_t(2)}, {"tag", int64_t(0)}}, 6);
  EXPECT_EQ(self.status().message(),
            "recv: peer 2 is rank 6's own coordinate on axis tp (a rank cannot receive from itself)");
}

TEST(OpBinderTest, ShardedFamiliesGetTheRanksSlice) {
  auto slice =
      bindFor(sc::OpKind::kShardSlice,
              {{"axis", std::string("tp")}, {"outer", int64_t(2)}, {"inner", int64_t(3)}, {"total", int64_t(10)}}, 6);
  ASSERT_TRUE(slice.isOk());
  const auto& l = std::get<LayoutParams>(*slice);
  EXPECT_EQ(l.members, 4);
  EXPECT_EQ(l.member, 2);
  EXPECT_EQ(l.total, 10);

  auto ce = bindFor(sc::OpKind::kCrossEntropyFwd,
                    {{"M", int64_t(4)},
                     {"V", int64_t(8)},
                     {"scale", 0.5},
                     {"shard_axis", std::string("tp")},
                     {"real_vocab", int64_t(30)}},
                    6);
  ASSERT_TRUE(ce.isOk());
  const auto& loss = std::get<LossParams>(*ce);
  ASSERT_TRUE(loss.vocabShard.has_value());
  EXPECT_EQ(loss.vocabShard->index, 2);
  EXPECT_EQ(loss.vocabShard->count, 4);
  EXPECT_EQ(loss.realVocab, 30);
  EXPECT_EQ(loss.scale, 0.5);

  auto pos = bindFor(
      sc::OpKind::kPosEmbeddingFwd,
      {{"B", int64_t(1)}, {"S", int64_t(16)}, {"H", int64_t(8)}, {"P", int64_t(64)}, {"shard_axis", std::string("tp")}},
      6);
  ASSERT_TRUE(pos.isOk());
  EXPECT_EQ(std::get<EmbeddingParams>(*pos).posBegin, 32);  // c·S, c = 2

  // grad_norm_sq's replica shards: the member index on replica_axis (no group: kernels never communicate).
  auto norm = bindFor(sc::OpKind::kGradNormSq, {{"replica_axis", std::string("tp")}, {"replicas", int64_t(2)}}, 6);
  ASSERT_TRUE(norm.isOk());
  const auto& g = std::get<OptimizerParams>(*norm);
  EXPECT_EQ(g.member, 2);
  EXPECT_EQ(g.replicas, 2);
  auto stats = bindFor(sc::OpKind::kCrossEntropyMax,
                       {{"M", int64_t(4)}, {"V", int64_t(8)}, {"shard_axis", std::string("tp")}}, 6);
  ASSERT_TRUE(stats.isOk());
  ASSERT_TRUE(std::get<LossParams>(*stats).vocabShard.has_value());
  EXPECT_EQ(std::get<LossParams>(*stats).vocabShard->index, 2);
}

std::string readDoc() {
  std::ifstream in(std::string(LLCDIST_SOURCE_DIR) + "/docs/adding-an-op.md");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The family table: each family's row lists exactly its ops, and every family has a row.
TEST(AddingAnOpDocTest, FamilyTableListsEveryOpUnderItsFamily) {
  const std::string doc = readDoc();
  ASSERT_FALSE(doc.empty()) << "docs/adding-an-op.md not found under " << LLCDIST_SOURCE_DIR;
  std::set<std::string> families;
  for (const sc::OpSpec& spec : sc::kOpSpecs) families.insert(std::string(ops::opDefs().find(spec.kind)->family));
  for (const std::string& family : families) {
    const std::string head = "| `" + family + "` |";
    const size_t at = doc.find(head);
    ASSERT_NE(at, std::string::npos) << "no row for family " << family;
    const std::string row = doc.substr(at, doc.find('\n', at) - at);
    const std::string opsCell = row.substr(head.size(), row.find('|', head.size()) - head.size());
    std::set<std::string> listed;
    std::istringstream words(opsCell);
    for (std::string w; words >> w;) listed.insert(w);
    std::set<std::string> expected;
    for (const sc::OpSpec& spec : sc::kOpSpecs)
      if (ops::opDefs().find(spec.kind)->family == family) expected.insert("`" + std::string(spec.name) + "`");
    EXPECT_EQ(listed, expected) << "family " << family;
  }
}

// The fuzzers link the runtime's loaders from runtime/Sources.cmake's list, which the core builds from
// too: every family's core file must be on it (a new family, as the page says), and both builds must
// take the list from there rather than keep their own.
TEST(AddingAnOpDocTest, TheFuzzersLinkEveryFamilysCore) {
  auto read = [](const std::string& rel) {
    std::ifstream in(std::string(LLCDIST_SOURCE_DIR) + "/" + rel);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string list = read("runtime/Sources.cmake"), fuzz = read("fuzz/CMakeLists.txt"),
                    core = read("runtime/CMakeLists.txt");
  ASSERT_FALSE(list.empty()) << "runtime/Sources.cmake not found under " << LLCDIST_SOURCE_DIR;
  ASSERT_FALSE(fuzz.empty()) << "fuzz/CMakeLists.txt not found under " << LLCDIST_SOURCE_DIR;
  EXPECT_NE(fuzz.find("include(${LLCDIST_ROOT}/runtime/Sources.cmake)"), std::string::npos);
  EXPECT_NE(fuzz.find("STATIC ${LLCDIST_RUNTIME_LOADER_SOURCES}"), std::string::npos)
      << "fuzz/CMakeLists.txt's runtime inputs are not runtime/Sources.cmake's list";
  EXPECT_NE(core.find("${LLCDIST_RUNTIME_LOADER_SOURCES}"), std::string::npos)
      << "runtime/CMakeLists.txt's core does not build from runtime/Sources.cmake's list";
  size_t cores = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(LLCDIST_SOURCE_DIR) + "/runtime/src/ops")) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".cpp") continue;
    ++cores;
    EXPECT_NE(list.find("${CMAKE_CURRENT_LIST_DIR}/src/ops/" + name), std::string::npos)
        << "runtime/src/ops/" << name << " is not in runtime/Sources.cmake's LLCDIST_RUNTIME_LOADER_SOURCES";
  }
  EXPECT_GE(cores, 10u);
}

// Every runtime/ or docs/ path the page names in backquotes exists (placeholders like <Family> aside).
TEST(AddingAnOpDocTest, NamedFilesExist) {
  const std::string doc = readDoc();
  ASSERT_FALSE(doc.empty());
  size_t named = 0;
  for (size_t at = doc.find('`'); at != std::string::npos; at = doc.find('`', at + 1)) {
    const size_t end = doc.find('`', at + 1);
    if (end == std::string::npos) break;
    const std::string word = doc.substr(at + 1, end - at - 1);
    at = end;
    if ((word.rfind("runtime/", 0) != 0 && word.rfind("docs/", 0) != 0) || word.find('<') != std::string::npos)
      continue;
    ++named;
    EXPECT_TRUE(std::filesystem::exists(std::string(LLCDIST_SOURCE_DIR) + "/" + word)) << word;
  }
  EXPECT_GE(named, 20u);
}

// The page's scratch op (docs/adding-an-op/silu.patch: a new elementwise op on both sides, which
// scripts/check-adding-an-op.sh builds and tests) touches exactly the files the page's "A new
// elementwise op, file by file" section lists, and still applies to this tree.
TEST(AddingAnOpDocTest, TheScratchOpPatchTouchesTheFilesThePageCounts) {
  const std::string doc = readDoc();
  const std::string head = "## A new elementwise op, file by file";
  const size_t at = doc.find(head);
  ASSERT_NE(at, std::string::npos) << "docs/adding-an-op.md has no section '" << head << "'";
  const size_t end = doc.find("\n## ", at + head.size());
  std::set<std::string> listed;
  std::istringstream section(doc.substr(at, end == std::string::npos ? std::string::npos : end - at));
  for (std::string line; std::getline(section, line);)
    if (line.rfind("- `", 0) == 0) listed.insert(line.substr(3, line.find('`', 3) - 3));

  const std::string patchPath = std::string(LLCDIST_SOURCE_DIR) + "/docs/adding-an-op/silu.patch";
  std::ifstream patch(patchPath);
  ASSERT_TRUE(patch.good()) << patchPath;
  std::set<std::string> touched;
  for (std::string line; std::getline(patch, line);)
    if (line.rfind("diff --git a/", 0) == 0) touched.insert(line.substr(13, line.find(" b/") - 13));
  EXPECT_EQ(listed, touched) << "the page's list and the patch's files differ";
  EXPECT_GE(touched.size(), 10u);

  // Applicable to the tree as it is (git apply works outside a repository too).
  if (std::system("git --version >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no git: the patch's applicability is not checked";
  const std::string cmd =
      "cd '" + std::string(LLCDIST_SOURCE_DIR) + "' && git apply --check '" + patchPath + "' 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0)
      << "docs/adding-an-op/silu.patch no longer applies: apply it with git apply -3, resolve, write git diff "
         "to it again and rerun scripts/check-adding-an-op.sh";
}

}  // namespace
}  // namespace llcdist::rt
