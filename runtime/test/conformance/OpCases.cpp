// The op cases of the backend conformance suite: every op kind once (several for ops with variants)
// through the interpreter on the backend under test, against a direct call of its CPU kernel on the
// same data. All buffers (inputs included) must match: bit for bit on the CPU, so a mis-wired
// argument role fails here; within the backend's tolerance elsewhere. The bf16 run stores every
// float buffer in bf16: the op must equal the f32 kernel on those values with every float result
// rounded to bf16 (bf16 storage, fp32 arithmetic).
#include "OpCases.h"

#include "PlanTestUtil.h"
#include "TestUtil.h"

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/Communicator.h"
#include "llcdist/runtime/Interpreter.h"
#include "llcdist/runtime/Kernels.h"
#include "llcdist/runtime/Plan.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <set>

namespace llcdist::rt {
namespace {

using testing::json;
namespace sc = schema;

struct Host {
  std::map<std::string, std::vector<std::vector<float>>> f;
  std::map<std::string, std::vector<std::vector<int32_t>>> i;
  std::map<std::string, std::vector<std::vector<double>>> d;  // f64 roles (always f64, also under bf16)
  bool bf16 = false;  // the run stores every float buffer in bf16 (a fused op's reference rounds its
                      // intermediates as the unfused ops stored them)
  void roundIfBf16(std::vector<float>& v) const {
    if (bf16)
      for (float& x : v) x = roundToBf16(x);
  }
  float* F(const std::string& role, size_t k = 0) { return f.at(role).at(k).data(); }
  int32_t* I(const std::string& role) { return i.at(role).at(0).data(); }
  double* D(const std::string& role) { return d.at(role).at(0).data(); }
};

struct Case {
  std::string op;
  std::vector<std::pair<std::string, std::vector<int64_t>>> roles;  // role -> element count of each buffer
  json attrs;
  std::function<void(Host&)> ref;
  int32_t idRange = 8;
  std::set<std::string> positive = {};
  std::string optimizer = "adamw";
  int64_t tp = 1;                       // mesh.tp of the plan (no communicator: only ops without collectives when > 1)
  int rank = 0;                         // the rank the interpreter runs
  std::set<std::string> f32Roles = {};  // roles whose buffers stay f32 in the bf16 run (classifier's dw_acc)
  // Overwrites some of the seeded inputs (the moe ops' ids, slots and group sizes, which random ids would
  // not make valid, and logits whose top-k no rounding can flip); float values set here are then rounded
  // as the bf16 run stores them.
  std::function<void(Host&)> init = {};
};

constexpr int64_t kStep = 2;  // optimizer t = 3
constexpr double kLr = 0.01;
constexpr int64_t kMicro = 1;

Status fillBatch(int64_t step, int64_t micro, int32_t* ids, int32_t* targets, int64_t B, int64_t S) {
  for (int64_t k = 0; k < B * S; ++k) ids[k] = int32_t(k + 1), targets[k] = int32_t(100 + k + 10 * step + micro);
  return Status::ok();
}

// The classifier op's kernel on the host copies (M 5, K 4, N 6, chunk 2, scale 0.5, grad_scale 0.1).
void classifierReference(Host& h, WeightLayout layout, bool accumulate, int64_t realVocab) {
  ClassifierParams p;
  p.linear = {5, 4, 6, layout, accumulate};
  p.chunk = 2;
  p.scale = 0.5;
  p.gradScale = 0.1;
  p.realVocab = realVocab;
  ClassifierArrays a;
  a.x = h.F("x");
  a.w = h.F("w");
  a.targets = h.I("targets");
  a.logits = h.F("logits");
  a.dx = h.F("dx");
  a.dw = h.F("dw");
  a.dwAcc = h.f.count("dw_acc") ? h.F("dw_acc") : nullptr;
  a.bf16Logits = h.bf16;
  double total = 0;
  ASSERT_TRUE(classifierForwardBackward(a, p, &total).isOk());
  h.F("loss")[0] += float(0.5 * (total / 5.0));
}

// The moe cases (T 4, H 3, E 4, k 2; the grouped GEMMs N 7, K 3, O 2, E 3).
MoeParams moeParams(bool normalize) { return MoeParams{4, 3, 4, 2, 0, 0, 0, normalize, false}; }
MoeParams groupedParams(bool accumulate) { return MoeParams{0, 0, 3, 0, 7, 3, 2, false, accumulate}; }
// Logits [4, 4] whose rows are permutations of values 0.75 apart (exact in bf16): no rounding on any
// backend reorders them, so the top-k is the same everywhere.
void moeLogits(Host& h) {
  const float levels[4] = {-1.0f, -0.25f, 0.5f, 1.25f};
  const int order[4][4] = {{2, 0, 3, 1}, {0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}};
  for (int t = 0; t < 4; ++t)
    for (int e = 0; e < 4; ++e) h.F("logits")[t * 4 + e] = levels[order[t][e]];
}
// The slots of moe_unpermute / _bwd: a permutation of the 8 assignment rows, as moe_permute writes them.
void moeSlots(Host& h) {
  const int32_t slots[8] = {5, 0, 7, 2, 1, 6, 3, 4};
  std::copy(slots, slots + 8, h.i.at("slots").at(0).begin());
}
// Slots into 10 rows with two dropped assignments (-1) and rows no slot names (4, 6, 8).
void moeDroppedSlots(Host& h) {
  const int32_t slots[8] = {5, -1, 7, 2, 1, -1, 3, 9};
  std::copy(slots, slots + 8, h.i.at("slots").at(0).begin());
}
// group_sizes of the grouped GEMMs: expert 1 empty, row 6 past the groups.
void moeGroups(Host& h) {
  const int32_t sizes[3] = {4, 0, 2};
  std::copy(sizes, sizes + 3, h.i.at("group_sizes").at(0).begin());
}

// The load-balancing loss: a router's statistics added onto the layers' before (experts in [0, E)), their
// gradient through the softmax, and the loss and its gradient from counts (two layers' assignments).
void moeAuxLossCases(std::vector<Case>& c) {
  c.push_back({"moe_router_stats",
               {{"logits", {16}}, {"experts", {8}}, {"counts", {4}}, {"probs", {4}}, {"counts_out", {4}},
                {"probs_out", {4}}},
               {{"T", 4}, {"E", 4}, {"k", 2}},
               [](Host& h) {
                 moeRouterStats(h.F("logits"), h.I("experts"), h.I("counts"), h.F("probs"), h.I("counts_out"),
                                h.F("probs_out"), moeParams(false));
               }});
  c.back().idRange = 4;
  c.push_back({"moe_router_stats_bwd", {{"logits", {16}}, {"dprobs", {4}}, {"dlogits", {16}}}, {{"T", 4}, {"E", 4}},
               [](Host& h) { moeRouterStatsBackward(h.F("logits"), h.F("dprobs"), h.F("dlogits"), moeParams(false)); }});
  MoeParams aux;
  aux.E = 4;
  aux.scale = 0.32;
  auto twoLayers = [](Host& h) {
    const int32_t counts[4] = {5, 1, 8, 2};
    std::copy(counts, counts + 4, h.I("counts"));
  };
  c.push_back({"moe_aux_loss", {{"counts", {4}}, {"probs", {4}}, {"loss", {1}}}, {{"E", 4}, {"scale", 0.32}},
               [aux](Host& h) { moeAuxLoss(h.I("counts"), h.F("probs"), h.F("loss"), aux); }});
  c.back().init = twoLayers;
  c.push_back({"moe_aux_loss_bwd", {{"counts", {4}}, {"dprobs", {4}}}, {{"E", 4}, {"scale", 0.32}},
               [aux](Host& h) { moeAuxLossBackward(h.I("counts"), h.F("dprobs"), aux); }});
  c.back().init = twoLayers;
}

std::vector<Case> moeCases() {
  std::vector<Case> c;
  for (bool normalize : {true, false}) {
    json attrs = {{"T", 4}, {"E", 4}, {"k", 2}, {"normalize", normalize}};
    c.push_back({"moe_route", {{"logits", {16}}, {"weights", {8}}, {"experts", {8}}}, attrs, [normalize](Host& h) {
                   moeRouteForward(h.F("logits"), h.F("weights"), h.I("experts"), moeParams(normalize));
                 }});
    c.back().init = moeLogits;
    c.push_back({"moe_route_bwd",
                 {{"logits", {16}}, {"experts", {8}}, {"dweights", {8}}, {"dlogits", {16}}},
                 attrs,
                 [normalize](Host& h) {
                   moeRouteBackward(h.F("logits"), h.I("experts"), h.F("dweights"), h.F("dlogits"),
                                    moeParams(normalize));
                 }});
    c.back().init = [](Host& h) {  // the experts moe_route selects
      moeLogits(h);
      std::vector<float> w(8);
      moeRouteForward(h.F("logits"), w.data(), h.I("experts"), moeParams(true));
    };
  }
  moeAuxLossCases(c);
  // Random expert ids in [0, 3): expert 3's group is empty.
  c.push_back({"moe_permute",
               {{"x", {12}}, {"experts", {8}}, {"xp", {24}}, {"slots", {8}}, {"group_sizes", {4}}},
               {{"T", 4}, {"H", 3}, {"E", 4}, {"k", 2}},
               [](Host& h) {
                 ASSERT_TRUE(
                     moePermute(h.F("x"), h.I("experts"), h.F("xp"), h.I("slots"), h.I("group_sizes"), moeParams(false))
                         .isOk());
               },
               3});
  // With a capacity (token dropping): 8 assignments over experts [0, 3) at C = 2 or 1 drop some; xp has
  // E·C rows, the tail past the kept ones zero.
  for (int64_t capacity : {2, 1}) {
    c.push_back({"moe_permute",
                 {{"x", {12}}, {"experts", {8}}, {"xp", {4 * capacity * 3}}, {"slots", {8}}, {"group_sizes", {4}}},
                 {{"T", 4}, {"H", 3}, {"E", 4}, {"k", 2}, {"capacity", capacity}},
                 [capacity](Host& h) {
                   MoeParams p = moeParams(false);
                   p.capacity = capacity;
                   ASSERT_TRUE(moePermute(h.F("x"), h.I("experts"), h.F("xp"), h.I("slots"), h.I("group_sizes"), p)
                                   .isOk());
                 },
                 3});
  }
  const json tokens = {{"T", 4}, {"H", 3}, {"k", 2}};
  c.push_back({"moe_unpermute", {{"xp", {24}}, {"slots", {8}}, {"weights", {8}}, {"y", {12}}}, tokens, [](Host& h) {
                 ASSERT_TRUE(moeUnpermute(h.F("xp"), h.I("slots"), h.F("weights"), h.F("y"), moeParams(false)).isOk());
               }});
  c.back().init = moeSlots;
  c.push_back({"moe_unpermute", {{"xp", {24}}, {"slots", {8}}, {"y", {12}}}, tokens, [](Host& h) {
                 ASSERT_TRUE(moeUnpermute(h.F("xp"), h.I("slots"), nullptr, h.F("y"), moeParams(false)).isOk());
               }});
  c.back().init = moeSlots;
  c.push_back({"moe_unpermute_bwd",
               {{"dy", {12}}, {"xp", {24}}, {"slots", {8}}, {"weights", {8}}, {"dxp", {24}}, {"dweights", {8}}},
               tokens,
               [](Host& h) {
                 ASSERT_TRUE(moeUnpermuteBackward(h.F("dy"), h.F("xp"), h.I("slots"), h.F("weights"), h.F("dxp"),
                                                  h.F("dweights"), moeParams(false))
                                 .isOk());
               }});
  c.back().init = moeSlots;
  // With attr N (xp's rows under a capacity: 10 here) and dropped assignments (slot -1).
  const json dropped = {{"T", 4}, {"H", 3}, {"k", 2}, {"N", 10}};
  c.push_back({"moe_unpermute", {{"xp", {30}}, {"slots", {8}}, {"weights", {8}}, {"y", {12}}}, dropped, [](Host& h) {
                 MoeParams p = moeParams(false);
                 p.N = 10;
                 ASSERT_TRUE(moeUnpermute(h.F("xp"), h.I("slots"), h.F("weights"), h.F("y"), p).isOk());
               }});
  c.back().init = moeDroppedSlots;
  c.push_back({"moe_unpermute_bwd",
               {{"dy", {12}}, {"xp", {30}}, {"slots", {8}}, {"weights", {8}}, {"dxp", {30}}, {"dweights", {8}}},
               dropped,
               [](Host& h) {
                 MoeParams p = moeParams(false);
                 p.N = 10;
                 ASSERT_TRUE(moeUnpermuteBackward(h.F("dy"), h.F("xp"), h.I("slots"), h.F("weights"), h.F("dxp"),
                                                  h.F("dweights"), p)
                                 .isOk());
               }});
  c.back().init = moeDroppedSlots;
  const json gemm = {{"N", 7}, {"K", 3}, {"O", 2}, {"E", 3}};
  c.push_back({"grouped_linear_fwd", {{"x", {21}}, {"w", {18}}, {"group_sizes", {3}}, {"y", {14}}}, gemm, [](Host& h) {
                 groupedLinearForward(h.F("x"), h.F("w"), h.I("group_sizes"), h.F("y"), groupedParams(false));
               }});
  c.back().init = moeGroups;
  c.push_back(
      {"grouped_linear_bwd_input", {{"dy", {14}}, {"w", {18}}, {"group_sizes", {3}}, {"dx", {21}}}, gemm, [](Host& h) {
         groupedLinearBackwardInput(h.F("dy"), h.F("w"), h.I("group_sizes"), h.F("dx"), groupedParams(false));
       }});
  c.back().init = moeGroups;
  for (bool accumulate : {true, false}) {
    json attrs = gemm;
    attrs["accumulate"] = accumulate;
    c.push_back({"grouped_linear_bwd_weight",
                 {{"dy", {14}}, {"x", {21}}, {"group_sizes", {3}}, {"dw", {18}}},
                 attrs,
                 [accumulate](Host& h) {
                   groupedLinearBackwardWeight(h.F("dy"), h.F("x"), h.I("group_sizes"), h.F("dw"),
                                               groupedParams(accumulate));
                 }});
    c.back().init = moeGroups;
  }
  c.push_back({"sigmoid_gate_fwd", {{"gate", {4}}, {"x", {12}}, {"y", {12}}}, {{"T", 4}, {"H", 3}}, [](Host& h) {
                 sigmoidGateForward(h.F("gate"), h.F("x"), h.F("y"), moeParams(false));
               }});
  c.push_back({"sigmoid_gate_bwd",
               {{"dy", {12}}, {"gate", {4}}, {"x", {12}}, {"dgate", {4}}, {"dx", {12}}},
               {{"T", 4}, {"H", 3}},
               [](Host& h) {
                 sigmoidGateBackward(h.F("dy"), h.F("gate"), h.F("x"), h.F("dgate"), h.F("dx"), moeParams(false));
               }});
  // moe_chunk_transpose (expert parallelism): a 2 × 3 grid with empty chunks, 6 of N = 9 rows (the tail
  // zero), both directions, with and without col_sizes.
  for (bool inverse : {false, true}) {
    c.push_back({"moe_chunk_transpose",
                 {{"x", {18}}, {"splits", {6}}, {"y", {18}}, {"col_sizes", {3}}},
                 {{"r", 2}, {"c", 3}, {"N", 9}, {"H", 2}, {"inverse", inverse}},
                 [inverse](Host& h) {
                   MoeParams p;
                   p.r = 2, p.c = 3, p.N = 9, p.H = 2, p.inverse = inverse;
                   ASSERT_TRUE(moeChunkTranspose(h.F("x"), h.I("splits"), h.F("y"), h.I("col_sizes"), p).isOk());
                 }});
    c.back().init = [](Host& h) {
      const int32_t splits[6] = {1, 0, 2, 2, 1, 0};
      std::copy(splits, splits + 6, h.i.at("splits").at(0).begin());
    };
  }
  c.push_back({"moe_chunk_transpose",
               {{"x", {8}}, {"splits", {4}}, {"y", {8}}},
               {{"r", 4}, {"c", 1}, {"N", 4}, {"H", 2}},
               [](Host& h) {
                 MoeParams p;
                 p.r = 4, p.c = 1, p.N = 4, p.H = 2;
                 ASSERT_TRUE(moeChunkTranspose(h.F("x"), h.I("splits"), h.F("y"), nullptr, p).isOk());
               }});
  c.back().init = [](Host& h) {
    const int32_t splits[4] = {0, 3, 0, 1};
    std::copy(splits, splits + 4, h.i.at("splits").at(0).begin());
  };
  // all_to_all_v over a single-rank group (the ep axis of a 1×1×1 mesh: n = 1, c = 3 chunks): the
  // splits come back as they are, y = x's first 5 rows, then zeros.
  c.push_back({"all_to_all_v",
               {{"x", {12}}, {"send_splits", {3}}, {"y", {14}}, {"recv_splits", {3}}},
               {{"axis", "ep"}, {"c", 3}, {"H", 2}, {"Nx", 6}, {"Ny", 7}},
               [](Host& h) {
                 ASSERT_TRUE(allToAllVSelf(0, h.F("x"), 6, h.I("send_splits"), h.F("y"), 7, h.I("recv_splits"), 3, 2,
                                           CommDType::kF32)
                                 .isOk());
               }});
  c.back().init = [](Host& h) {
    const int32_t splits[3] = {2, 0, 3};
    std::copy(splits, splits + 3, h.i.at("send_splits").at(0).begin());
  };
  // grad_norm_sq's `add` as a list: summed after the gradients, in order.
  c.push_back({"grad_norm_sq",
               {{"grads", {5, 7}}, {"add", {1, 1}}, {"sq", {1}}},
               json::object(),
               [](Host& h) {
                 h.D("sq")[0] = gradNormPartial({{h.F("grads", 0), 5}, {h.F("grads", 1), 7}}, {}, false, 0.0) +
                                h.d.at("add").at(0)[0] + h.d.at("add").at(1)[0];
               },
               8,
               {"add"}});
  return c;
}

std::vector<Case> cases() {
  const RopeConfig llama3{500000.0f, true, 8.0f, 1.0f, 4.0f, 16};
  return {
      {"load_microbatch",
       {{"ids", {6}}, {"targets", {6}}},
       {{"B", 2}, {"S", 3}},
       [](Host& h) { fillBatch(kStep, kMicro, h.I("ids"), h.I("targets"), 2, 3).isOk(); }},
      {"fill_zero",
       {{"x", {5, 7}}},
       json::object(),
       [](Host& h) {
         for (auto& v : h.f["x"]) std::fill(v.begin(), v.end(), 0.0f);
       }},
      {"embedding_fwd",
       {{"ids", {4}}, {"table", {24}}, {"out", {12}}},
       {{"M", 4}, {"V", 8}, {"H", 3}},
       [](Host& h) { ASSERT_TRUE(embeddingForward(h.I("ids"), h.F("table"), h.F("out"), 4, 8, 3).isOk()); }},
      {"embedding_bwd_weight",
       {{"ids", {4}}, {"dout", {12}}, {"dtable", {24}}},
       {{"M", 4}, {"V", 8}, {"H", 3}, {"accumulate", true}},
       [](Host& h) { ASSERT_TRUE(embeddingBackward(h.I("ids"), h.F("dout"), h.F("dtable"), 4, 8, 3, true).isOk()); }},
      // Vocabulary-parallel embedding on tp = 2, rank 1: table rows are global ids [4, 8); ids in [0, 8).
      {"embedding_fwd",
       {{"ids", {4}}, {"table", {12}}, {"out", {12}}},
       {{"M", 4}, {"V", 4}, {"H", 3}, {"shard_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(embeddingForward(h.I("ids"), h.F("table"), h.F("out"), 4, 4, 3, {1, 2}).isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      {"embedding_bwd_weight",
       {{"ids", {6}}, {"dout", {18}}, {"dtable", {12}}},
       {{"M", 6}, {"V", 4}, {"H", 3}, {"accumulate", true}, {"shard_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(embeddingBackward(h.I("ids"), h.F("dout"), h.F("dtable"), 6, 4, 3, true, {1, 2}).isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      // torch's nn.Embedding(padding_idx): the ids equal to padding_idx (three of six here) add nothing, on
      // one table and on rank 1 of a vocabulary split over tp = 2 (global rows [4, 8)).
      {"embedding_bwd_weight",
       {{"ids", {6}}, {"dout", {18}}, {"dtable", {24}}},
       {{"M", 6}, {"V", 8}, {"H", 3}, {"accumulate", true}, {"padding_idx", 2}},
       [](Host& h) {
         ASSERT_TRUE(embeddingBackward(h.I("ids"), h.F("dout"), h.F("dtable"), 6, 8, 3, true, {}, 1.0f, 2).isOk());
       },
       8,
       {},
       "adamw",
       1,
       0,
       {},
       [](Host& h) {
         const int32_t ids[] = {2, 5, 2, 0, 7, 2};
         std::copy_n(ids, 6, h.I("ids"));
       }},
      {"embedding_bwd_weight",
       {{"ids", {6}}, {"dout", {18}}, {"dtable", {12}}},
       {{"M", 6}, {"V", 4}, {"H", 3}, {"accumulate", true}, {"shard_axis", "tp"}, {"padding_idx", 6}},
       [](Host& h) {
         ASSERT_TRUE(embeddingBackward(h.I("ids"), h.F("dout"), h.F("dtable"), 6, 4, 3, true, {1, 2}, 1.0f, 6).isOk());
       },
       8,
       {},
       "adamw",
       2,
       1,
       {},
       [](Host& h) {
         const int32_t ids[] = {6, 1, 6, 4, 7, 6};
         std::copy_n(ids, 6, h.I("ids"));
       }},
      {"pos_embedding_fwd",
       {{"x", {24}}, {"wpe", {20}}, {"y", {24}}},
       {{"B", 2}, {"S", 3}, {"H", 4}, {"P", 5}},
       [](Host& h) { ASSERT_TRUE(positionEmbeddingForward(h.F("x"), h.F("wpe"), h.F("y"), 2, 3, 4, 5).isOk()); }},
      {"pos_embedding_bwd_weight",
       {{"dy", {24}}, {"dwpe", {20}}},
       {{"B", 2}, {"S", 3}, {"H", 4}, {"P", 5}, {"accumulate", false}},
       [](Host& h) { ASSERT_TRUE(positionEmbeddingBackwardWeight(h.F("dy"), h.F("dwpe"), 2, 3, 4, 5, false).isOk()); }},
      // Sequence-parallel position embedding on tp = 2, rank 1: S = 2 local positions [2, 4) of wpe [5, 4].
      {"pos_embedding_fwd",
       {{"x", {16}}, {"wpe", {20}}, {"y", {16}}},
       {{"B", 2}, {"S", 2}, {"H", 4}, {"P", 5}, {"shard_axis", "tp"}},
       [](Host& h) { ASSERT_TRUE(positionEmbeddingForward(h.F("x"), h.F("wpe"), h.F("y"), 2, 2, 4, 5, 2).isOk()); },
       8,
       {},
       "adamw",
       2,
       1},
      {"pos_embedding_bwd_weight",
       {{"dy", {16}}, {"dwpe", {20}}},
       {{"B", 2}, {"S", 2}, {"H", 4}, {"P", 5}, {"accumulate", true}, {"shard_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(positionEmbeddingBackwardWeight(h.F("dy"), h.F("dwpe"), 2, 2, 4, 5, true, 2).isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      // OPT's table: positions 0..2 from row 2 of wpe [5, 4].
      {"pos_embedding_fwd",
       {{"x", {24}}, {"wpe", {20}}, {"y", {24}}},
       {{"B", 2}, {"S", 3}, {"H", 4}, {"P", 5}, {"offset", 2}},
       [](Host& h) { ASSERT_TRUE(positionEmbeddingForward(h.F("x"), h.F("wpe"), h.F("y"), 2, 3, 4, 5, 2).isOk()); }},
      {"pos_embedding_bwd_weight",
       {{"dy", {24}}, {"dwpe", {20}}},
       {{"B", 2}, {"S", 3}, {"H", 4}, {"P", 5}, {"accumulate", false}, {"offset", 2}},
       [](Host& h) {
         ASSERT_TRUE(positionEmbeddingBackwardWeight(h.F("dy"), h.F("dwpe"), 2, 3, 4, 5, false, 2).isOk());
       }},
      // ... sequence-parallel on tp = 2, rank 1: positions [2, 4) at rows [3, 5).
      {"pos_embedding_fwd",
       {{"x", {16}}, {"wpe", {20}}, {"y", {16}}},
       {{"B", 2}, {"S", 2}, {"H", 4}, {"P", 5}, {"shard_axis", "tp"}, {"offset", 1}},
       [](Host& h) { ASSERT_TRUE(positionEmbeddingForward(h.F("x"), h.F("wpe"), h.F("y"), 2, 2, 4, 5, 3).isOk()); },
       8,
       {},
       "adamw",
       2,
       1},
      // Over a single-rank axis: posBegin 0, the unsharded kernel.
      {"pos_embedding_bwd_weight",
       {{"dy", {24}}, {"dwpe", {20}}},
       {{"B", 2}, {"S", 3}, {"H", 4}, {"P", 5}, {"accumulate", false}, {"shard_axis", "dp"}},
       [](Host& h) { ASSERT_TRUE(positionEmbeddingBackwardWeight(h.F("dy"), h.F("dwpe"), 2, 3, 4, 5, false).isOk()); }},
      {"layer_norm_fwd",
       {{"x", {12}}, {"gamma", {4}}, {"beta", {4}}, {"y", {12}}, {"mean", {3}}, {"rstd", {3}}},
       {{"M", 3}, {"H", 4}, {"eps", 1e-5}},
       [](Host& h) {
         layerNormForward(h.F("x"), h.F("gamma"), h.F("beta"), h.F("y"), h.F("mean"), h.F("rstd"), 3, 4, 1e-5f);
       }},
      {"layer_norm_bwd_input",
       {{"dy", {12}}, {"x", {12}}, {"gamma", {4}}, {"mean", {3}}, {"rstd", {3}}, {"dx", {12}}},
       {{"M", 3}, {"H", 4}},
       [](Host& h) {
         layerNormBackwardInput(h.F("dy"), h.F("x"), h.F("gamma"), h.F("mean"), h.F("rstd"), h.F("dx"), 3, 4);
       }},
      // Without gamma and beta (OLMo's LayerNorm): the reference given gamma 1 and beta 0.
      {"layer_norm_fwd",
       {{"x", {12}}, {"y", {12}}, {"mean", {3}}, {"rstd", {3}}},
       {{"M", 3}, {"H", 4}, {"eps", 1e-5}},
       [](Host& h) {
         const std::vector<float> ones(4, 1.0f), zeros(4, 0.0f);
         layerNormForward(h.F("x"), ones.data(), zeros.data(), h.F("y"), h.F("mean"), h.F("rstd"), 3, 4, 1e-5f);
       }},
      {"layer_norm_bwd_input",
       {{"dy", {12}}, {"x", {12}}, {"mean", {3}}, {"rstd", {3}}, {"dx", {12}}},
       {{"M", 3}, {"H", 4}},
       [](Host& h) {
         const std::vector<float> ones(4, 1.0f);
         layerNormBackwardInput(h.F("dy"), h.F("x"), ones.data(), h.F("mean"), h.F("rstd"), h.F("dx"), 3, 4);
       }},
      {"layer_norm_bwd_weight",
       {{"dy", {12}}, {"x", {12}}, {"mean", {3}}, {"rstd", {3}}, {"dgamma", {4}}, {"dbeta", {4}}},
       {{"M", 3}, {"H", 4}, {"accumulate", true}},
       [](Host& h) {
         layerNormBackwardWeight(h.F("dy"), h.F("x"), h.F("mean"), h.F("rstd"), h.F("dgamma"), h.F("dbeta"), 3, 4,
                                 true);
       }},
      {"rms_norm_fwd",
       {{"x", {12}}, {"weight", {4}}, {"y", {12}}, {"rstd", {3}}},
       {{"M", 3}, {"H", 4}, {"eps", 1e-6}},
       [](Host& h) { rmsNormForward(h.F("x"), h.F("weight"), h.F("y"), h.F("rstd"), 3, 4, 1e-6f); }},
      {"rms_norm_bwd_input",
       {{"dy", {12}}, {"x", {12}}, {"weight", {4}}, {"rstd", {3}}, {"dx", {12}}},
       {{"M", 3}, {"H", 4}},
       [](Host& h) { rmsNormBackwardInput(h.F("dy"), h.F("x"), h.F("weight"), h.F("rstd"), h.F("dx"), 3, 4); }},
      {"rms_norm_bwd_weight",
       {{"dy", {12}}, {"x", {12}}, {"rstd", {3}}, {"dweight", {4}}},
       {{"M", 3}, {"H", 4}, {"accumulate", true}},
       [](Host& h) { rmsNormBackwardWeight(h.F("dy"), h.F("x"), h.F("rstd"), h.F("dweight"), 3, 4, true); }},
      {"linear_fwd",
       {{"x", {12}}, {"w", {20}}, {"bias", {5}}, {"y", {15}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "in_out"}},
       [](Host& h) { linearForward(h.F("x"), h.F("w"), h.F("bias"), h.F("y"), 3, 4, 5, WeightLayout::kInOut); }},
      {"linear_fwd",
       {{"x", {12}}, {"w", {20}}, {"y", {15}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "out_in"}},
       [](Host& h) { linearForward(h.F("x"), h.F("w"), nullptr, h.F("y"), 3, 4, 5, WeightLayout::kOutIn); }},
      // With gelu / gelu_x (llcdist-plan-fuse-epilogues): the GEMM, its output rounded as stored, then the
      // GELU's forward / backward.
      {"linear_fwd",
       {{"x", {12}}, {"w", {20}}, {"bias", {5}}, {"y", {15}}, {"gelu", {15}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "out_in"}},
       [](Host& h) {
         linearForward(h.F("x"), h.F("w"), h.F("bias"), h.F("y"), 3, 4, 5, WeightLayout::kOutIn);
         h.roundIfBf16(h.f["y"][0]);
         geluTanhForward(h.F("y"), h.F("gelu"), 15);
       }},
      {"linear_bwd_input",
       {{"dy", {15}}, {"w", {20}}, {"gelu_x", {12}}, {"dx", {12}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "in_out"}, {"accumulate", false}},
       [](Host& h) {
         std::vector<float> dAct(12);
         linearBackwardInput(h.F("dy"), h.F("w"), dAct.data(), 3, 4, 5, WeightLayout::kInOut, false);
         h.roundIfBf16(dAct);
         geluTanhBackward(dAct.data(), h.F("gelu_x"), h.F("dx"), 12);
       }},
      {"linear_bwd_input",
       {{"dy", {15}}, {"w", {20}}, {"dx", {12}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "out_in"}, {"accumulate", true}},
       [](Host& h) { linearBackwardInput(h.F("dy"), h.F("w"), h.F("dx"), 3, 4, 5, WeightLayout::kOutIn, true); }},
      {"linear_bwd_weight",
       {{"dy", {15}}, {"x", {12}}, {"dw", {20}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "in_out"}, {"accumulate", true}},
       [](Host& h) { linearBackwardWeight(h.F("dy"), h.F("x"), h.F("dw"), 3, 4, 5, WeightLayout::kInOut, true); }},
      // With db (llcdist-plan-fuse-epilogues): linear_bwd_bias of the same dy, accumulated as dw is.
      {"linear_bwd_weight",
       {{"dy", {15}}, {"x", {12}}, {"dw", {20}}, {"db", {5}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "out_in"}, {"accumulate", true}},
       [](Host& h) {
         linearBackwardWeight(h.F("dy"), h.F("x"), h.F("dw"), 3, 4, 5, WeightLayout::kOutIn, true);
         linearBackwardBias(h.F("dy"), h.F("db"), 3, 5, true);
       }},
      {"linear_bwd_weight",
       {{"dy", {15}}, {"x", {12}}, {"dw", {20}}, {"db", {5}}},
       {{"M", 3}, {"K", 4}, {"N", 5}, {"layout", "in_out"}, {"accumulate", false}},
       [](Host& h) {
         linearBackwardWeight(h.F("dy"), h.F("x"), h.F("dw"), 3, 4, 5, WeightLayout::kInOut, false);
         linearBackwardBias(h.F("dy"), h.F("db"), 3, 5, false);
       }},
      {"linear_bwd_bias",
       {{"dy", {15}}, {"db", {5}}},
       {{"M", 3}, {"N", 5}, {"accumulate", true}},
       [](Host& h) { linearBackwardBias(h.F("dy"), h.F("db"), 3, 5, true); }},
      {"bias_add",
       {{"y", {15}}, {"bias", {5}}},
       {{"M", 3}, {"N", 5}},
       [](Host& h) { biasAddForward(h.F("y"), h.F("bias"), 3, 5); }},
      {"split_fwd",
       {{"x", {12}}, {"outs", {6, 2, 4}}},
       {{"rows", 2}, {"sizes", {3, 1, 2}}},
       [](Host& h) {
         for (int r = 0; r < 2; ++r) {
           std::memcpy(h.F("outs", 0) + r * 3, h.F("x") + r * 6, 12);
           std::memcpy(h.F("outs", 1) + r * 1, h.F("x") + r * 6 + 3, 4);
           std::memcpy(h.F("outs", 2) + r * 2, h.F("x") + r * 6 + 4, 8);
         }
       }},
      {"split_bwd",
       {{"douts", {6, 2, 4}}, {"dx", {12}}},
       {{"rows", 2}, {"sizes", {3, 1, 2}}},
       [](Host& h) {
         for (int r = 0; r < 2; ++r) {
           std::memcpy(h.F("dx") + r * 6, h.F("douts", 0) + r * 3, 12);
           std::memcpy(h.F("dx") + r * 6 + 3, h.F("douts", 1) + r * 1, 4);
           std::memcpy(h.F("dx") + r * 6 + 4, h.F("douts", 2) + r * 2, 8);
         }
       }},
      {"rope_fwd",
       {{"x", {24}}, {"y", {24}}},
       {{"B", 1}, {"S", 3}, {"n", 2}, {"hd", 4}, {"theta", 10000.0}},
       [](Host& h) {
         auto t = makeRopeTable(RopeConfig{}, 4, 0, 3).value();
         ASSERT_TRUE(ropeForward(t, h.F("x"), h.F("y"), 1, 3, 2, 4).isOk());
       }},
      // A sequence split over tp = 2, rank 1: rows at positions [3, 6).
      {"rope_fwd",
       {{"x", {24}}, {"y", {24}}},
       {{"B", 1}, {"S", 3}, {"n", 2}, {"hd", 4}, {"theta", 10000.0}, {"shard_axis", "tp"}},
       [](Host& h) {
         auto t = makeRopeTable(RopeConfig{}, 4, 3, 3).value();
         ASSERT_TRUE(ropeForward(t, h.F("x"), h.F("y"), 1, 3, 2, 4).isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      {"rope_bwd",
       {{"dy", {24}}, {"dx", {24}}},
       {{"B", 1},
        {"S", 3},
        {"n", 2},
        {"hd", 4},
        {"theta", 500000.0},
        {"llama3", true},
        {"factor", 8.0},
        {"low_freq_factor", 1.0},
        {"high_freq_factor", 4.0},
        {"original_max_position_embeddings", 16}},
       [llama3](Host& h) {
         auto t = makeRopeTable(llama3, 4, 0, 3).value();
         ASSERT_TRUE(ropeBackward(t, h.F("dy"), h.F("dx"), 1, 3, 2, 4).isOk());
       }},
      {"attention_fwd",
       {{"q", {24}}, {"k", {12}}, {"v", {12}}, {"out", {24}}, {"lse", {6}}},
       {{"B", 1}, {"S", 3}, {"nh", 2}, {"nkv", 1}, {"hd", 4}},
       [](Host& h) {
         ASSERT_TRUE(attentionForward({1, 3, 2, 1, 4}, h.F("q"), h.F("k"), h.F("v"), h.F("out"), h.F("lse")).isOk());
       }},
      {"attention_bwd",
       {{"dout", {24}},
        {"q", {24}},
        {"k", {12}},
        {"v", {12}},
        {"out", {24}},
        {"lse", {6}},
        {"dq", {24}},
        {"dk", {12}},
        {"dv", {12}}},
       {{"B", 1}, {"S", 3}, {"nh", 2}, {"nkv", 1}, {"hd", 4}},
       [](Host& h) {
         ASSERT_TRUE(attentionBackward({1, 3, 2, 1, 4}, h.F("dout"), h.F("q"), h.F("k"), h.F("v"), h.F("out"),
                                       h.F("lse"), h.F("dq"), h.F("dk"), h.F("dv"))
                         .isOk());
       }},
      // BLOOM's ALiBi on tp = 2, rank 1: its 2 heads are heads 2 and 3 of alibi_heads 4 (head_axis tp).
      {"attention_fwd",
       {{"q", {24}}, {"k", {24}}, {"v", {24}}, {"out", {24}}, {"lse", {6}}},
       {{"B", 1}, {"S", 3}, {"nh", 2}, {"nkv", 2}, {"hd", 4}, {"alibi_heads", 4}, {"head_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(
             attentionForward({1, 3, 2, 2, 4, 0, {4, 2}}, h.F("q"), h.F("k"), h.F("v"), h.F("out"), h.F("lse")).isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      {"attention_bwd",
       {{"dout", {24}},
        {"q", {24}},
        {"k", {24}},
        {"v", {24}},
        {"out", {24}},
        {"lse", {6}},
        {"dq", {24}},
        {"dk", {24}},
        {"dv", {24}}},
       {{"B", 1}, {"S", 3}, {"nh", 2}, {"nkv", 2}, {"hd", 4}, {"alibi_heads", 4}, {"head_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(attentionBackward({1, 3, 2, 2, 4, 0, {4, 2}}, h.F("dout"), h.F("q"), h.F("k"), h.F("v"),
                                       h.F("out"), h.F("lse"), h.F("dq"), h.F("dk"), h.F("dv"))
                         .isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      // Ring attention on tp = 2, rank 1 (rows [3, 6)): step 0 is the causal diagonal block, step 1 the
      // block of member 0's rows [0, 3), all visible.
      {"attention_block_fwd",
       {{"q", {24}}, {"k", {12}}, {"v", {12}}, {"out", {24}}, {"lse", {6}}},
       {{"B", 1}, {"S", 3}, {"nh", 2}, {"nkv", 1}, {"hd", 4}, {"axis", "tp"}, {"step", 0}},
       [](Host& h) {
         const AttentionBlock blk{1, 3, 3, 2, 1, 4, 3, 3};
         ASSERT_TRUE(attentionBlockForward(blk, h.F("q"), h.F("k"), h.F("v"), h.F("out"), h.F("lse")).isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      {"attention_block_bwd",
       {{"dout", {24}},
        {"q", {24}},
        {"k", {12}},
        {"v", {12}},
        {"out", {24}},
        {"lse", {6}},
        {"dq", {24}},
        {"dk", {12}},
        {"dv", {12}}},
       {{"B", 1}, {"S", 3}, {"nh", 2}, {"nkv", 1}, {"hd", 4}, {"axis", "tp"}, {"step", 1}},
       [](Host& h) {
         const AttentionBlock blk{1, 3, 3, 2, 1, 4, 3, 0};
         ASSERT_TRUE(attentionBlockBackward(blk, h.F("dout"), h.F("q"), h.F("k"), h.F("v"), h.F("out"), h.F("lse"),
                                            h.F("dq"), h.F("dk"), h.F("dv"))
                         .isOk());
       },
       8,
       {},
       "adamw",
       2,
       1},
      {"attention_merge",
       {{"out", {24}}, {"lse", {6}}, {"out_b", {24}}, {"lse_b", {6}}},
       {{"B", 1}, {"S", 3}, {"nh", 2}, {"hd", 4}},
       [](Host& h) { attentionMerge(1, 3, 2, 4, h.F("out"), h.F("lse"), h.F("out_b"), h.F("lse_b")); }},
      {"gelu_tanh_fwd", {{"x", {6}}, {"y", {6}}}, {{"n", 6}}, [](Host& h) { geluTanhForward(h.F("x"), h.F("y"), 6); }},
      {"gelu_tanh_bwd",
       {{"dy", {6}}, {"x", {6}}, {"dx", {6}}},
       {{"n", 6}},
       [](Host& h) { geluTanhBackward(h.F("dy"), h.F("x"), h.F("dx"), 6); }},
      {"gelu_erf_fwd", {{"x", {6}}, {"y", {6}}}, {{"n", 6}}, [](Host& h) { geluErfForward(h.F("x"), h.F("y"), 6); }},
      {"gelu_erf_bwd",
       {{"dy", {6}}, {"x", {6}}, {"dx", {6}}},
       {{"n", 6}},
       [](Host& h) { geluErfBackward(h.F("dy"), h.F("x"), h.F("dx"), 6); }},
      {"clamp_fwd",
       {{"x", {6}}, {"y", {6}}},
       {{"n", 6}, {"limit", 0.5}},
       [](Host& h) { clampForward(h.F("x"), h.F("y"), 6, 0.5f); }},
      {"clamp_bwd",
       {{"dy", {6}}, {"x", {6}}, {"dx", {6}}},
       {{"n", 6}, {"limit", 0.5}},
       [](Host& h) { clampBackward(h.F("dy"), h.F("x"), h.F("dx"), 6, 0.5f); }},
      {"relu_fwd", {{"x", {6}}, {"y", {6}}}, {{"n", 6}}, [](Host& h) { reluForward(h.F("x"), h.F("y"), 6); }},
      {"relu_bwd",
       {{"dy", {6}}, {"x", {6}}, {"dx", {6}}},
       {{"n", 6}},
       [](Host& h) { reluBackward(h.F("dy"), h.F("x"), h.F("dx"), 6); }},
      {"scale",
       {{"x", {6}}, {"y", {6}}},
       {{"n", 6}, {"factor", 0.0625}},
       [](Host& h) { scaleForward(h.F("x"), h.F("y"), 6, 0.0625f); }},
      {"swiglu_fwd",
       {{"gate", {6}}, {"up", {6}}, {"y", {6}}},
       {{"n", 6}},
       [](Host& h) { swigluForward(h.F("gate"), h.F("up"), h.F("y"), 6); }},
      {"swiglu_bwd",
       {{"dy", {6}}, {"gate", {6}}, {"up", {6}}, {"dgate", {6}}, {"dup", {6}}},
       {{"n", 6}},
       [](Host& h) { swigluBackward(h.F("dy"), h.F("gate"), h.F("up"), h.F("dgate"), h.F("dup"), 6); }},
      {"add",
       {{"a", {6}}, {"b", {6}}, {"y", {6}}},
       {{"n", 6}},
       [](Host& h) { addForward(h.F("a"), h.F("b"), h.F("y"), 6); }},
      {"accumulate", {{"x", {6}}, {"y", {6}}}, {{"n", 6}}, [](Host& h) { accumulateInto(h.F("x"), h.F("y"), 6); }},
      {"copy", {{"x", {6}}, {"y", {6}}}, {{"n", 6}}, [](Host& h) { std::memcpy(h.F("y"), h.F("x"), 24); }},
      // Same dtype on both sides here (f32 -> f32, or bf16 -> bf16 in the bf16 run): a copy. Conversions:
      // Bf16Test.CastOpConvertsBetweenDtypes.
      {"cast", {{"x", {6}}, {"y", {6}}}, {{"n", 6}}, [](Host& h) { std::memcpy(h.F("y"), h.F("x"), 24); }},
      {"cross_entropy_fwd",
       {{"logits", {15}}, {"targets", {3}}, {"loss", {1}}},
       {{"M", 3}, {"V", 5}, {"scale", 0.5}},
       [](Host& h) {
         double mean = 0;
         ASSERT_TRUE(crossEntropyForward(h.F("logits"), h.I("targets"), nullptr, &mean, 3, 5).isOk());
         h.F("loss")[0] += float(0.5 * mean);
       },
       5},
      {"cross_entropy_bwd",
       {{"logits", {15}}, {"targets", {3}}, {"dlogits", {15}}},
       {{"M", 3}, {"V", 5}, {"scale", 0.1}},
       [](Host& h) {
         ASSERT_TRUE(crossEntropyBackward(h.F("logits"), h.I("targets"), h.F("dlogits"), 3, 5, 0.1f).isOk());
       },
       5},
      // Vocabulary-parallel cross entropy over a single-rank axis: the local steps of the decomposition
      // (the plan's all-reduces between them are collectives, not part of any kernel).
      {"cross_entropy_max",
       {{"logits", {15}}, {"targets", {3}}, {"row_max", {3}}},
       {{"M", 3}, {"V", 5}, {"shard_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(crossEntropyShardMax(h.F("logits"), h.I("targets"), h.D("row_max"), 3, 5, {0, 1}).isOk());
       },
       5},
      {"cross_entropy_sums",
       {{"logits", {15}}, {"targets", {3}}, {"row_max", {3}}, {"row_sums", {6}}},
       {{"M", 3}, {"V", 5}, {"shard_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(crossEntropyShardSums(h.F("logits"), h.I("targets"), h.D("row_max"), h.D("row_sums"), 3, 5, {0, 1})
                         .isOk());
       },
       5},
      {"cross_entropy_fwd",
       {{"logits", {15}}, {"targets", {3}}, {"loss", {1}}, {"row_max", {3}}, {"row_sums", {6}}},
       {{"M", 3}, {"V", 5}, {"scale", 0.5}, {"shard_axis", "tp"}},
       [](Host& h) {
         double mean = 0;
         ASSERT_TRUE(crossEntropyForwardVocabParallel(h.D("row_max"), h.D("row_sums"), &mean, 3).isOk());
         h.F("loss")[0] += float(0.5 * mean);
       },
       5,
       {"row_sums"}},
      {"cross_entropy_bwd",
       {{"logits", {15}}, {"targets", {3}}, {"dlogits", {15}}, {"row_max", {3}}, {"row_sums", {6}}},
       {{"M", 3}, {"V", 5}, {"scale", 0.1}, {"shard_axis", "tp"}},
       [](Host& h) {
         ASSERT_TRUE(crossEntropyBackwardVocabParallel(h.F("logits"), h.I("targets"), h.D("row_max"), h.D("row_sums"),
                                                       h.F("dlogits"), 3, 5, 0.1f, {0, 1})
                         .isOk());
       },
       5,
       {"row_sums"}},
      // The fused classifier (llcdist-plan-fuse-classifier): M = 5 rows in chunks of 2 (the last one short),
      // N = 6 columns of which 5 are real; straight onto dw, and through the f32 dw_acc.
      {"classifier",
       {{"x", {20}}, {"w", {24}}, {"targets", {5}}, {"loss", {1}}, {"logits", {12}}, {"dx", {20}}, {"dw", {24}}},
       {{"M", 5},
        {"K", 4},
        {"N", 6},
        {"layout", "out_in"},
        {"accumulate", true},
        {"chunk", 2},
        {"scale", 0.5},
        {"grad_scale", 0.1}},
       [](Host& h) { classifierReference(h, WeightLayout::kOutIn, true, 0); },
       6},
      {"classifier",
       {{"x", {20}},
        {"w", {24}},
        {"targets", {5}},
        {"loss", {1}},
        {"logits", {12}},
        {"dx", {20}},
        {"dw", {24}},
        {"dw_acc", {24}}},
       {{"M", 5},
        {"K", 4},
        {"N", 6},
        {"layout", "in_out"},
        {"accumulate", false},
        {"chunk", 2},
        {"scale", 0.5},
        {"grad_scale", 0.1}},
       [](Host& h) { classifierReference(h, WeightLayout::kInOut, false, 0); },
       6,
       {},
       "adamw",
       1,
       0,
       {"dw_acc"}},
      {"grad_norm",
       {{"grads", {5, 7}}, {"norm", {1}}},
       {{"max_norm", 0.5}},
       [](Host& h) {
         h.F("norm")[0] = float(clipGradNorm({{h.F("grads", 0), 5}, {h.F("grads", 1), 7}}, 0.5));
       }},
      // The split norm's local steps: the partial squared norm (replica shards counted on member 0 of
      // each replica group; rank 0 is), then the norm of the (here not reduced) total and the clip.
      {"grad_norm_sq",
       {{"grads", {5, 7}}, {"replica_shards", {3}}, {"add", {1}}, {"sq", {1}}},
       {{"replicas", 2}, {"replica_axis", "tp"}},
       [](Host& h) {
         h.D("sq")[0] = gradNormPartial({{h.F("grads", 0), 5}, {h.F("grads", 1), 7}}, {{h.F("replica_shards"), 3}},
                                        true, h.D("add")[0]);
       },
       8,
       {"add"},
       "adamw",
       /*tp=*/2},
      {"grad_norm_clip",
       {{"sq", {1}}, {"grads", {5, 7}}, {"norm", {1}}},
       {{"max_norm", 0.5}},
       [](Host& h) {
         h.F("norm")[0] = float(gradNormFinish(h.D("sq")[0], 0.5, {}));
         const float coef = clipCoefficient(std::sqrt(h.D("sq")[0]), 0.5);
         if (coef < 1.0f)
           for (auto& g : h.f["grads"]) scaleInPlace(g.data(), int64_t(g.size()), coef);
       },
       8,
       {"sq"}},
      // Collectives over single-rank groups (the plan's mesh is 1×1×1): all_reduce is the identity,
      // all_gather and reduce_scatter copy x to y.
      {"all_reduce", {{"x", {5, 3}}}, {{"axis", "dp"}, {"op", "avg"}}, [](Host&) {}},
      {"all_gather",
       {{"x", {6}}, {"y", {6}}},
       {{"axis", "tp"}, {"outer", 2}, {"inner", 3}},
       [](Host& h) { std::memcpy(h.F("y"), h.F("x"), 24); }},
      {"reduce_scatter",
       {{"x", {6}}, {"y", {6}}},
       {{"axis", "dp"}, {"outer", 3}, {"inner", 2}, {"op", "sum"}},
       [](Host& h) { std::memcpy(h.F("y"), h.F("x"), 24); }},
      // all_to_all over a single-rank group (n = 1): both layouts are [outer, mid, inner], a copy.
      {"all_to_all",
       {{"x", {12}}, {"y", {12}}},
       {{"axis", "cp"}, {"outer", 2}, {"mid", 3}, {"inner", 2}, {"x_rank_dim", 2}},
       [](Host& h) { std::memcpy(h.F("y"), h.F("x"), 48); }},
      // ZeRO's shard_slice on tp = 2, rank 1: y [2, 3] = columns [3, 6) of each row of x [2, 6].
      {"shard_slice",
       {{"x", {12}}, {"y", {6}}},
       {{"axis", "tp"}, {"outer", 2}, {"inner", 3}},
       [](Host& h) {
         for (int o = 0; o < 2; ++o) std::memcpy(h.F("y") + o * 3, h.F("x") + o * 6 + 3, 12);
       },
       8,
       {},
       "adamw",
       2,
       1},
      {"adamw",
       {{"param", {5}}, {"grad", {5}}, {"m", {5}}, {"v", {5}}},
       {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}},
       [](Host& h) {
         AdamWConfig c{kLr, 0.9, 0.95, 1e-8, 0.1};
         ASSERT_TRUE(adamwStep(h.F("param"), h.F("grad"), h.F("m"), h.F("v"), 5, kStep + 1, c).isOk());
       },
       8,
       {"v"}},
      {"sgd",
       {{"param", {5}}, {"grad", {5}}, {"momentum_buf", {5}}},
       {{"momentum", 0.9}, {"weight_decay", 0.01}},
       [](Host& h) {
         SgdConfig c;
         c.lr = kLr;
         c.momentum = 0.9;
         c.weightDecay = 0.01;
         ASSERT_TRUE(sgdStep(h.F("param"), h.F("grad"), h.F("momentum_buf"), 5, kStep + 1, c).isOk());
       },
       8,
       {},
       "sgd"},
      // The _multi forms: each tensor's update as the single op's (two tensors of different sizes).
      {"adamw_multi",
       {{"params", {5, 3}}, {"grads", {5, 3}}, {"m", {5, 3}}, {"v", {5, 3}}},
       {{"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}},
       [](Host& h) {
         AdamWConfig c{kLr, 0.9, 0.95, 1e-8, 0.1};
         for (size_t k = 0; k < 2; ++k)
           ASSERT_TRUE(
               adamwStep(h.F("params", k), h.F("grads", k), h.F("m", k), h.F("v", k), k == 0 ? 5 : 3, kStep + 1, c)
                   .isOk());
       },
       8,
       {"v"}},
      {"sgd_multi",
       {{"params", {5, 3}}, {"grads", {5, 3}}, {"momentum_bufs", {5, 3}}},
       {{"momentum", 0.9}, {"weight_decay", 0.01}},
       [](Host& h) {
         SgdConfig c;
         c.lr = kLr;
         c.momentum = 0.9;
         c.weightDecay = 0.01;
         for (size_t k = 0; k < 2; ++k)
           ASSERT_TRUE(sgdStep(h.F("params", k), h.F("grads", k), h.F("momentum_bufs", k), k == 0 ? 5 : 3, kStep + 1, c)
                           .isOk());
       },
       8,
       {},
       "sgd"},
      // The fused norms (llcdist-plan-fuse-norm): the unfused kernels in turn, each intermediate rounded as
      // its unfused buffer stored it.
      {"add_layer_norm_fwd",
       {{"a", {12}},
        {"b", {12}},
        {"sum", {12}},
        {"gamma", {4}},
        {"beta", {4}},
        {"y", {12}},
        {"mean", {3}},
        {"rstd", {3}}},
       {{"M", 3}, {"H", 4}, {"eps", 1e-5}},
       [](Host& h) {
         addForward(h.F("a"), h.F("b"), h.F("sum"), 12);
         h.roundIfBf16(h.f["sum"][0]);
         layerNormForward(h.F("sum"), h.F("gamma"), h.F("beta"), h.F("y"), h.F("mean"), h.F("rstd"), 3, 4, 1e-5f);
       }},
      {"layer_norm_bwd",  // without gamma, dgamma and dbeta: the input gradient and the residual's add
       {{"dy", {12}}, {"x", {12}}, {"mean", {3}}, {"rstd", {3}}, {"dresidual", {12}}, {"dx", {12}}},
       {{"M", 3}, {"H", 4}, {"accumulate", false}},
       [](Host& h) {
         const std::vector<float> ones(4, 1.0f);
         std::vector<float> dxIn(12);
         layerNormBackwardInput(h.F("dy"), h.F("x"), ones.data(), h.F("mean"), h.F("rstd"), dxIn.data(), 3, 4);
         h.roundIfBf16(dxIn);
         addForward(h.F("dresidual"), dxIn.data(), h.F("dx"), 12);
       }},
      {"add_layer_norm_fwd",
       {{"a", {12}}, {"b", {12}}, {"sum", {12}}, {"y", {12}}, {"mean", {3}}, {"rstd", {3}}},
       {{"M", 3}, {"H", 4}, {"eps", 1e-5}},
       [](Host& h) {
         addForward(h.F("a"), h.F("b"), h.F("sum"), 12);
         h.roundIfBf16(h.f["sum"][0]);
         const std::vector<float> ones(4, 1.0f), zeros(4, 0.0f);
         layerNormForward(h.F("sum"), ones.data(), zeros.data(), h.F("y"), h.F("mean"), h.F("rstd"), 3, 4, 1e-5f);
       }},
      {"add_rms_norm_fwd",
       {{"a", {12}}, {"b", {12}}, {"sum", {12}}, {"weight", {4}}, {"y", {12}}, {"rstd", {3}}},
       {{"M", 3}, {"H", 4}, {"eps", 1e-6}},
       [](Host& h) {
         addForward(h.F("a"), h.F("b"), h.F("sum"), 12);
         h.roundIfBf16(h.f["sum"][0]);
         rmsNormForward(h.F("sum"), h.F("weight"), h.F("y"), h.F("rstd"), 3, 4, 1e-6f);
       }},
      {"layer_norm_bwd",
       {{"dy", {12}},
        {"x", {12}},
        {"gamma", {4}},
        {"mean", {3}},
        {"rstd", {3}},
        {"dresidual", {12}},
        {"dx", {12}},
        {"dgamma", {4}},
        {"dbeta", {4}}},
       {{"M", 3}, {"H", 4}, {"accumulate", true}},
       [](Host& h) {
         layerNormBackwardWeight(h.F("dy"), h.F("x"), h.F("mean"), h.F("rstd"), h.F("dgamma"), h.F("dbeta"), 3, 4,
                                 true);
         std::vector<float> dxIn(12);
         layerNormBackwardInput(h.F("dy"), h.F("x"), h.F("gamma"), h.F("mean"), h.F("rstd"), dxIn.data(), 3, 4);
         h.roundIfBf16(dxIn);
         addForward(h.F("dresidual"), dxIn.data(), h.F("dx"), 12);
       }},
      {"layer_norm_bwd",
       {{"dy", {12}},
        {"x", {12}},
        {"gamma", {4}},
        {"mean", {3}},
        {"rstd", {3}},
        {"dx", {12}},
        {"dgamma", {4}},
        {"dbeta", {4}}},
       {{"M", 3}, {"H", 4}, {"accumulate", false}},
       [](Host& h) {
         layerNormBackwardWeight(h.F("dy"), h.F("x"), h.F("mean"), h.F("rstd"), h.F("dgamma"), h.F("dbeta"), 3, 4,
                                 false);
         layerNormBackwardInput(h.F("dy"), h.F("x"), h.F("gamma"), h.F("mean"), h.F("rstd"), h.F("dx"), 3, 4);
       }},
      {"rms_norm_bwd",
       {{"dy", {12}}, {"x", {12}}, {"weight", {4}}, {"rstd", {3}}, {"dresidual", {12}}, {"dx", {12}}, {"dweight", {4}}},
       {{"M", 3}, {"H", 4}, {"accumulate", true}},
       [](Host& h) {
         rmsNormBackwardWeight(h.F("dy"), h.F("x"), h.F("rstd"), h.F("dweight"), 3, 4, true);
         std::vector<float> dxIn(12);
         rmsNormBackwardInput(h.F("dy"), h.F("x"), h.F("weight"), h.F("rstd"), dxIn.data(), 3, 4);
         h.roundIfBf16(dxIn);
         addForward(h.F("dresidual"), dxIn.data(), h.F("dx"), 12);
       }},
      {"cast_multi",
       {{"x", {6, 4}}, {"y", {6, 4}}},
       json::object(),
       [](Host& h) {
         std::memcpy(h.F("y", 0), h.F("x", 0), 24);
         std::memcpy(h.F("y", 1), h.F("x", 1), 16);
       }},
  };
}

// bf16: every float buffer is bf16 (host values rounded to bf16 first); the op must equal the f32 kernel
// on those values with every float result rounded to bf16 (bf16 storage, fp32 arithmetic), bit for bit.
// Elementwise within `tol` of the CPU reference (the first few misses are reported).
template <typename T>
void expectWithin(const T* got, const T* want, size_t n, const conformance::Tolerance& tol, const std::string& role,
                  size_t k) {
  int misses = 0;
  for (size_t i = 0; i < n; ++i)
    if (!tol.within(double(got[i]), double(want[i])) && misses++ < 4)
      ADD_FAILURE() << "role " << role << "[" << k << "][" << i << "]: " << got[i] << " vs the CPU's " << want[i]
                    << " (atol " << tol.atol << ", rtol " << tol.rtol << ")";
}

void runCase(const Case& c, uint32_t seed, bool bf16, const conformance::BackendUnderTest& under) {
  SCOPED_TRACE(c.op + (bf16 ? " (bf16 buffers)" : "") + " on " + under.name);
  const auto kind = sc::parseOpKind(c.op);
  ASSERT_TRUE(kind.has_value());
  testing::PlanBuilder b(/*vocab=*/8, /*seqLen=*/3, /*microBatch=*/2, /*microbatches=*/2, c.optimizer);
  json args = json::object();
  Host host;
  host.bf16 = bf16;
  std::vector<std::tuple<int64_t, std::string, size_t, bool, bool>> bufs;  // id, role, k, is i32, is f64
  for (const auto& [role, counts] : c.roles) {
    const int ai = sc::argIndex(*kind, role);
    ASSERT_GE(ai, 0) << role;
    const sc::ArgSpec& spec = sc::opSpec(*kind).args[size_t(ai)];
    const bool i32 = spec.type == sc::ArgType::kI32, f64 = spec.type == sc::ArgType::kF64;
    json ids = json::array();
    for (size_t k = 0; k < counts.size(); ++k) {
      const bool bf16Buffer = bf16 && !c.f32Roles.count(role);
      const int64_t id = b.buffer(role + std::to_string(k), "activation", {counts[k]},
                                  i32          ? "i32"
                                  : f64        ? "f64"
                                  : bf16Buffer ? "bf16"
                                               : "f32");
      ids.push_back(id);
      bufs.emplace_back(id, role, k, i32, f64);
      if (f64) {
        std::vector<double> v;
        for (float x : testing::randn(counts[k], seed++)) v.push_back(c.positive.count(role) ? std::abs(double(x)) : x);
        host.d[role].push_back(std::move(v));
      } else if (i32) {
        host.i[role].push_back(testing::randIds(counts[k], c.idRange, seed++));
      } else {
        std::vector<float> v = testing::randn(counts[k], seed++);
        if (c.positive.count(role))
          for (float& x : v) x = std::abs(x);
        if (bf16Buffer)
          for (float& x : v) x = roundToBf16(x);
        host.f[role].push_back(std::move(v));
      }
    }
    args[role] = sc::isListArity(spec.arity) ? ids : ids[0];
  }
  if (c.init) {
    c.init(host);
    for (auto& [role, vs] : host.f)
      if (!c.f32Roles.count(role))
        for (auto& v : vs) host.roundIfBf16(v);
  }
  if (c.tp > 1) {
    b.manifest["mesh"]["tp"] = c.tp;
    json ranks = json::array();
    for (int64_t r = 0; r < c.tp; ++r) ranks.push_back(r);
    b.manifest["programs"][0]["ranks"] = ranks;
  }
  b.op("s", c.op, args, c.attrs, "test-loc");
  b.action("s", kMicro);

  Plan plan;
  auto m = parseManifest(b.manifest.dump(), "manifest.json");
  ASSERT_TRUE(m.isOk()) << m.status().message();
  plan.manifest = m.value();
  auto p = parseProgram(b.program.dump(), "program-0.json", plan.manifest);
  ASSERT_TRUE(p.isOk()) << p.status().message();
  plan.programs.push_back(std::move(p).value());
  auto backend = under.make(c.rank);
  ASSERT_TRUE(backend.isOk()) << backend.status().message();
  auto interp = Interpreter::create(plan, 0, **backend, c.rank);
  ASSERT_TRUE(interp.isOk()) << interp.status().message();
  for (const auto& [id, role, k, i32, f64] : bufs)
    ASSERT_TRUE((f64   ? (*interp)->writeBuffer(id, host.d[role][k].data())
                 : i32 ? (*interp)->writeBuffer(id, host.i[role][k].data())
                       : (*interp)->writeF32(id, host.f[role][k].data()))
                    .isOk());
  Status s = (*interp)->runSubroutine(0, kStep, kMicro, kLr, fillBatch);
  ASSERT_TRUE(s.isOk()) << s.message();
  c.ref(host);
  if (bf16) {
    for (auto& [role, vs] : host.f)
      if (!c.f32Roles.count(role))
        for (auto& v : vs)
          for (float& x : v) x = roundToBf16(x);
    for (const auto& [id, role, k, i32, f64] : bufs) {
      if (i32 || f64) continue;
      const std::vector<float> got = (*interp)->readF32(id).value();
      if (under.bf16.bitwise())
        EXPECT_EQ(std::memcmp(got.data(), host.f[role][k].data(), got.size() * 4), 0)
            << "role " << role << "[" << k << "] ";
      else
        expectWithin(got.data(), host.f[role][k].data(), got.size(), under.bf16, role, k);
    }
    return;
  }
  for (const auto& [id, role, k, i32, f64] : bufs) {
    const BufferDesc& d = plan.programs[0].buffers[size_t(id)];
    std::vector<char> got(size_t(d.bytes));
    ASSERT_TRUE((*interp)->readBuffer(id, got.data()).isOk());
    const void* want = f64   ? (const void*)host.d[role][k].data()
                       : i32 ? (const void*)host.i[role][k].data()
                             : host.f[role][k].data();
    if (i32 || under.f32.bitwise())
      EXPECT_EQ(std::memcmp(got.data(), want, got.size()), 0) << "role " << role << "[" << k << "]";
    else if (f64)
      expectWithin(reinterpret_cast<const double*>(got.data()), host.d[role][k].data(), got.size() / 8, under.f32, role,
                   k);
    else
      expectWithin(reinterpret_cast<const float*>(got.data()), host.f[role][k].data(), got.size() / 4, under.f32, role,
                   k);
  }
}

}  // namespace

std::set<std::string> conformance::runEveryOpCase(const BackendUnderTest& backend, bool bf16) {
  std::set<std::string> covered;
  uint32_t seed = 1;
  std::vector<Case> all = cases();
  for (Case& c : moeCases()) all.push_back(std::move(c));
  for (const Case& c : all) {
    runCase(c, seed, bf16, backend);
    seed += 100;
    covered.insert(c.op);
  }
  return covered;
}

}  // namespace llcdist::rt
