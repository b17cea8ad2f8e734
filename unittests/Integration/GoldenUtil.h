//===- GoldenUtil.h - the golden rule: a parallel plan vs one device ------===//
//
// Shared by ParallelTest (dp, tp, sp) and PipelineTest (pp): compile a
// shipped tiny model for a mesh, train it 3 steps on the shipped corpus, and
// compare the losses and every gathered parameter with the single-device run.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_UNITTESTS_INTEGRATION_GOLDENUTIL_H
#define LLCDIST_UNITTESTS_INTEGRATION_GOLDENUTIL_H

#include "PlanTestUtil.h"

#include "llcdist/runtime/Safetensors.h"
#include "llcdist/runtime/Train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <sstream>

namespace llcdist::test {

struct Trained {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> params;
};

/// The options every golden run shares: global batch 8 of 16 tokens, SGD
/// (lr 0.05, momentum 0.9) or AdamW (lr 2e-3), clipping at 1.0.
inline TrainingPipelineOptions goldenOptions(const std::string &optimizer) {
  TrainingPipelineOptions opt;
  opt.optimizer = optimizer;
  opt.lr = optimizer == "sgd" ? 0.05 : 2e-3; // golden tolerances know AdamW's lr
  opt.momentum = optimizer == "sgd" ? 0.9 : 0.0;
  opt.gradClip = 1.0;
  return opt;
}

/// The seed every golden run initializes the parameters with.
constexpr uint64_t kGoldenSeed = 11;

/// Trains the plan in `dir` 3 steps on the shipped corpus from seed
/// kGoldenSeed, saving the (gathered) parameters to dir/params.safetensors;
/// returns the losses and the saved parameters. Failures are reported as
/// test failures naming `tag` (`expectOk` false: a failed run is expected, and
/// only returns fewer losses); `dir` is left in place. `checkAsync` runs the
/// plan in the checking mode of asynchronous plans (RunOptions::checkAsync).
/// The golden runs' options: `steps` quiet steps of the plan in `dir` on the
/// training corpus with the golden seed.
inline rt::RunOptions goldenRunOptions(const std::string &dir, int64_t steps = 3) {
  rt::RunOptions o;
  o.planDir = dir;
  o.steps = steps;
  o.data = std::string(LLCDIST_SOURCE_DIR) + "/data/corpus_train.bin";
  o.seed = kGoldenSeed;
  o.quiet = true;
  return o;
}

/// Trains with `o` (its saveParams set) and returns the losses and the
/// saved parameters; failures are test failures naming `tag` (`expectOk`
/// false: a failed run is expected, and only the losses are returned).
/// `result`: the run's result, where the caller wants more of it.
inline Trained trainWith(const rt::RunOptions &o, const std::string &tag, bool expectOk = true,
                         rt::RunResult *result = nullptr) {
  Trained t;
  rt::RunResult own;
  rt::RunResult &res = result ? *result : own;
  std::ostringstream progress;
  rt::Status st = rt::runTraining(o, progress, &res);
  if (!expectOk) {
    for (const auto &s : res.steps)
      t.losses.push_back(s.loss);
    return t;
  }
  EXPECT_TRUE(st.isOk()) << tag << ": " << st.toString();
  for (const auto &s : res.steps)
    t.losses.push_back(s.loss);
  auto reader = rt::SafetensorsReader::open(o.saveParams);
  EXPECT_TRUE(reader.isOk()) << tag << ": " << reader.status().toString();
  if (reader.isOk())
    for (const auto &info : reader->tensors()) {
      auto v = reader->readF32(info.name);
      EXPECT_TRUE(v.isOk()) << tag << ": " << info.name;
      if (v.isOk())
        t.params[info.name] = v.value();
    }
  return t;
}

inline Trained runGoldenSteps(const std::string &dir, const std::string &tag,
                              bool checkAsync = false, bool expectOk = true) {
  rt::RunOptions o = goldenRunOptions(dir);
  o.saveParams = dir + "/params.safetensors";
  o.checkAsync = checkAsync;
  return trainWith(o, tag, expectOk);
}

/// Two runs that must agree bit for bit: every loss and every parameter.
inline void expectSameBits(const Trained &a, const Trained &b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i;
  ASSERT_EQ(a.params.size(), b.params.size());
  for (const auto &[name, x] : a.params) {
    const auto &y = b.params.at(name);
    ASSERT_EQ(x.size(), y.size()) << name;
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0) << name << " differs";
  }
}

/// Compiles `model` with `opt` (mesh included), micro-batch `microBatch` of
/// a global batch of 8 sequences of 16 tokens and element type `dtype`,
/// trains it with runGoldenSteps (in the checking mode with `checkAsync`)
/// and removes the plan.
inline Trained trainPlan(const std::string &model, const TrainingPipelineOptions &opt,
                         int64_t microBatch, const std::string &tag,
                         const std::string &dtype = "f32", bool checkAsync = false) {
  TrainingShape shape;
  shape.seqLen = 16;
  shape.microBatch = microBatch;
  shape.globalBatch = 8;
  shape.dtype = dtype;
  std::string dir = compilePlan(model, shape, opt, tag);
  EXPECT_FALSE(dir.empty()) << tag << ": compilation failed";
  if (dir.empty())
    return Trained{};
  Trained t = runGoldenSteps(dir, tag, checkAsync);
  std::filesystem::remove_all(dir);
  return t;
}

/// How close a parallel run must come to the single-device one.
struct Tolerance {
  double slack = 0;      ///< absolute slack on top of 1e-5 relative, all elements
  double outlierSlack = 0; ///< the larger slack the few outliers may use
  size_t outliers = 0;   ///< how many elements may use it
};

/// One context for a test binary's compiles (every dialect registered).
inline mlir::MLIRContext &sharedContext() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    registerAllDialects(registry);
    return new mlir::MLIRContext(registry);
  }();
  return *ctx;
}

/// Writes `module` into a plan directory named after `tag`, trains it with
/// runGoldenSteps in the checking mode (issue #12: a started op completes
/// at its wait, its buffers poisoned meanwhile) and removes the plan.
inline Trained trainInCheckingMode(mlir::ModuleOp module, const std::string &tag) {
  std::string dir = tempPath("llcdist-" + tag).string();
  std::filesystem::remove_all(dir);
  EXPECT_TRUE(mlir::succeeded(writePlanDirectory(module, dir))) << tag;
  Trained t = runGoldenSteps(dir, tag, /*checkAsync=*/true);
  std::filesystem::remove_all(dir);
  return t;
}

/// The single-device run of `model` under `optimizer` (micro-batch
/// `microBatch`), trained once per test binary.
inline const Trained &singleDeviceRun(const std::string &model, const std::string &optimizer,
                                      int64_t microBatch) {
  static std::map<std::string, Trained> cache;
  auto [it, fresh] =
      cache.try_emplace(model + "/" + optimizer + "/" + std::to_string(microBatch));
  if (fresh)
    it->second = trainPlan(model, goldenOptions(optimizer), microBatch,
                           "single-device-" + model + "-" + optimizer + "-mb" +
                               std::to_string(microBatch));
  return it->second;
}

/// SGD is linear in the gradient: 1e-5 relative everywhere (and since Adam is
/// blind to a gradient's scale, SGD is the test that catches a wrong reduction
/// factor). AdamW divides by sqrt(v): where a gradient element nearly cancels
/// to zero, the rounding of its sum (which dp, tp and pp reorder) changes the
/// sign or size of m/sqrt(v), and so the update by up to one step lr. So under
/// AdamW: losses within 1e-5 relative; parameters within 1e-5 relative + 1% of
/// lr, except at most 10 elements of ~200,000 (seen: 2), which stay within one
/// step. A wrong partition moves most elements by O(lr).
inline Tolerance goldenTolerance(const std::string &optimizer) {
  const double lr = 2e-3;
  return optimizer == "adamw" ? Tolerance{0.01 * lr, lr, 10} : Tolerance{};
}

/// Losses within 1e-5 relative; every parameter element within
/// 1e-5·max(|a|, 1e-3) + slack, except at most `outliers` elements, which
/// must stay within 1e-5·max(|a|, 1e-3) + outlierSlack.
inline void expectSame(const Trained &ref, const Trained &got, const std::string &what,
                       const Tolerance &tol) {
  ASSERT_EQ(ref.losses.size(), got.losses.size()) << what;
  for (size_t i = 0; i < ref.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::fabs(ref.losses[i]))
        << what << ": loss of step " << i;
  ASSERT_EQ(ref.params.size(), got.params.size()) << what;
  size_t outliers = 0;
  for (const auto &[name, a] : ref.params) {
    auto it = got.params.find(name);
    ASSERT_NE(it, got.params.end()) << what << ": no parameter " << name;
    const auto &b = it->second;
    ASSERT_EQ(a.size(), b.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) {
      double strict = 1e-5 * std::max(std::fabs(double(a[i])), 1e-3);
      double diff = std::fabs(double(a[i]) - b[i]);
      if (diff <= strict + tol.slack)
        continue;
      ++outliers;
      EXPECT_LE(diff, strict + tol.outlierSlack)
          << what << ": " << name << "[" << i << "] " << a[i] << " vs " << b[i];
    }
  }
  EXPECT_LE(outliers, tol.outliers) << what << ": elements beyond 1e-5 relative + "
                                    << tol.slack;
}

/// How far a bf16 run is from another: the largest relative loss and
/// absolute parameter differences, and whether every bit is the same.
struct Deviation {
  double lossRel = 0, paramAbs = 0;
  bool identical = true;
};

inline Deviation deviation(const Trained &ref, const Trained &got) {
  Deviation d;
  EXPECT_EQ(ref.losses.size(), got.losses.size());
  for (size_t i = 0; i < ref.losses.size() && i < got.losses.size(); ++i) {
    d.lossRel = std::max(d.lossRel, std::fabs(got.losses[i] - ref.losses[i]) / std::fabs(ref.losses[i]));
    d.identical &= got.losses[i] == ref.losses[i];
  }
  EXPECT_EQ(ref.params.size(), got.params.size());
  for (const auto &[name, a] : ref.params) {
    auto it = got.params.find(name);
    if (it == got.params.end() || it->second.size() != a.size()) {
      ADD_FAILURE() << "parameter " << name << " missing or resized";
      continue;
    }
    for (size_t i = 0; i < a.size(); ++i) {
      d.paramAbs = std::max(d.paramAbs, std::fabs(double(a[i]) - double(it->second[i])));
      d.identical &= a[i] == it->second[i];
    }
  }
  return d;
}

} // namespace llcdist::test

#endif
