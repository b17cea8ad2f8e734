// cuDNN fused attention through the cuDNN frontend's SDPA graphs (CudnnAttention.h). The one translation
// unit of the project that includes cudnn_frontend.h: compiled with LLCDIST_HAVE_CUDNN_FRONTEND=1 when
// runtime/CMakeLists.txt finds the frontend headers, cuDNN, nvrtc and libcuda; a stub otherwise.
//
// A graph per AttentionKey, built at prepare() the way the frontend's samples and llm.c's cudnn_att.cpp
// build theirs: bf16 I/O with f32 intermediates and compute; Q, K, V (and O, dO, dQ, dK, dV) described
// in place by the dims and strides of AttentionPlan.h (no copies, GQA by fewer K/V heads); the causal mask
// as a diagonal band with right bound 0 aligned top-left (key j <= query i), with a sliding window W also
// left bound W (the frontend keeps column + W > row: key j > i − W); the scale baked into the graph
// as a value (it is part of the key); Stats f32 [b,h,s,1]; plans from heuristics mode A. Each tensor has
// a fixed uid (its AttentionTensor + 1), so a step's variant pack is nine pointers by uid.
#include "cuda/CudnnAttention.h"

#include <memory>
#include <string>

#if LLCDIST_HAVE_CUDNN_FRONTEND

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <exception>
#include <initializer_list>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace llcdist::rt::cuda {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

int64_t uidOf(AttentionTensor t) { return int64_t(t) + 1; }

// "9.19.0" from cudnnGetVersion()'s major·10000 + minor·100 + patch (cuDNN 9's encoding).
std::string cudnnVersionName(size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string frontendVersionName() {
  return std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

const char* errorCodeName(fe::error_code_t c) {
  switch (c) {
    case fe::error_code_t::OK: return "OK";
    case fe::error_code_t::ATTRIBUTE_NOT_SET: return "ATTRIBUTE_NOT_SET";
    case fe::error_code_t::SHAPE_DEDUCTION_FAILED: return "SHAPE_DEDUCTION_FAILED";
    case fe::error_code_t::INVALID_TENSOR_NAME: return "INVALID_TENSOR_NAME";
    case fe::error_code_t::INVALID_VARIANT_PACK: return "INVALID_VARIANT_PACK";
    case fe::error_code_t::GRAPH_NOT_SUPPORTED: return "GRAPH_NOT_SUPPORTED";
    case fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED: return "GRAPH_EXECUTION_PLAN_CREATION_FAILED";
    case fe::error_code_t::GRAPH_EXECUTION_FAILED: return "GRAPH_EXECUTION_FAILED";
    case fe::error_code_t::HEURISTIC_QUERY_FAILED: return "HEURISTIC_QUERY_FAILED";
    case fe::error_code_t::UNSUPPORTED_GRAPH_FORMAT: return "UNSUPPORTED_GRAPH_FORMAT";
    case fe::error_code_t::CUDA_API_FAILED: return "CUDA_API_FAILED";
    case fe::error_code_t::CUDNN_BACKEND_API_FAILED: return "CUDNN_BACKEND_API_FAILED";
    case fe::error_code_t::INVALID_CUDA_DEVICE: return "INVALID_CUDA_DEVICE";
    case fe::error_code_t::HANDLE_ERROR: return "HANDLE_ERROR";
    case fe::error_code_t::INVALID_VALUE: return "INVALID_VALUE";
    case fe::error_code_t::NVRTC_COMPILATION_FAILED: return "NVRTC_COMPILATION_FAILED";
  }
  return "unknown frontend error";
}

// cuDNN's own last message (cuDNN 9 keeps one per thread), "" when it has none.
std::string cudnnLastError() {
  char buf[1024] = {};
  cudnnGetLastErrorString(buf, sizeof(buf));
  return std::string(buf);
}

// "<step>: GRAPH_NOT_SUPPORTED: <frontend message> [cuDNN: <last error>]". Build failures that mean
// "cuDNN has no plan for this problem" are NotFound (the caller falls back to the own kernel, as
// GemmRunner's "no algorithm"); everything else is Internal.
Status frontendError(const char* step, const fe::error_object& e) {
  std::string m = std::string(step) + ": " + errorCodeName(e.code) + ": " + e.err_msg;
  const std::string last = cudnnLastError();
  if (!last.empty()) m += " [cuDNN: " + last + "]";
  const bool noPlan = e.code == fe::error_code_t::GRAPH_NOT_SUPPORTED ||
                      e.code == fe::error_code_t::HEURISTIC_QUERY_FAILED ||
                      e.code == fe::error_code_t::GRAPH_EXECUTION_PLAN_CREATION_FAILED;
  return noPlan ? Status::notFound(std::move(m)) : Status::internal(std::move(m));
}

Status cudnnFailure(cudnnStatus_t s, const char* expr) {
  std::string m = std::string(expr) + ": " + cudnnGetErrorString(s) + " (" + std::to_string(int(s)) + ")";
  const std::string last = cudnnLastError();
  if (!last.empty()) m += " [cuDNN: " + last + "]";
  return Status::internal(std::move(m));
}

#define LLCDIST_CUDNN_STATUS(expr)                                         \
  do {                                                                     \
    const cudnnStatus_t llcdist_cudnn_s_ = (expr);                         \
    if (llcdist_cudnn_s_ != CUDNN_STATUS_SUCCESS) return cudnnFailure(llcdist_cudnn_s_, #expr); \
  } while (0)
#define LLCDIST_FE_TRY(step, expr)                                         \
  do {                                                                     \
    const fe::error_object llcdist_fe_e_ = (expr);                         \
    if (!llcdist_fe_e_.is_good()) return frontendError((step), llcdist_fe_e_); \
  } while (0)

std::vector<int64_t> vec(const std::array<int64_t, 4>& a) { return std::vector<int64_t>(a.begin(), a.end()); }

// Names the tensor, its uid, dims and strides (and f32 for Stats; bf16 comes from the graph's I/O type).
void describe(fe::graph::Tensor_attributes& a, const AttentionProblem& p, AttentionTensor t) {
  const AttentionLayout l = attentionLayout(p, t);
  a.set_name(attentionTensorName(t)).set_uid(uidOf(t)).set_dim(vec(l.dim)).set_stride(vec(l.stride));
  if (t == AttentionTensor::kStats) a.set_data_type(fe::DataType_t::FLOAT);
}
TensorPtr input(fe::graph::Graph& g, const AttentionProblem& p, AttentionTensor t) {
  fe::graph::Tensor_attributes a;
  describe(a, p, t);
  return g.tensor(a);
}
void output(const TensorPtr& tensor, const AttentionProblem& p, AttentionTensor t) {
  describe(*tensor, p, t);
  tensor->set_output(true);
}

// The current device's compute capability (major·10 + minor), 0 with an error in *why.
int currentSmVersion(std::string* why) {
  int device = 0, major = 0, minor = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
  if (e != cudaSuccess) {
    if (why) *why = std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")";
    return 0;
  }
  return major * 10 + minor;
}

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspaceBytes = 0;
};

class FrontendAttention final : public CudnnAttention {
public:
  FrontendAttention(int rank, CudnnTarget target) : rank_(rank), target_(target) {}
  ~FrontendAttention() override {
    cache_.clear();  // the plans before the handle they were built on
    if (handle_) cudnnDestroy(handle_);
  }

  Status init() {
    LLCDIST_CUDNN_STATUS(cudnnCreate(&handle_));
    return Status::ok();
  }

  StatusOr<int64_t> prepare(const AttentionProblem& p) override {
    const std::string reason = cudnnAttentionUnsupportedReason(p, target_);
    if (!reason.empty())
      return Status::invalidArgument("cuDNN SDPA does not take " + describeAttention(p) + ": " + reason)
          .withRank(rank_);
    const AttentionKey key = attentionKey(p);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second.workspaceBytes;
    CachedGraph built;
    Status s = guarded([&] { return build(p, built); });
    if (!s.isOk()) return std::move(s).withContext(context("building", p)).withRank(rank_);
    const int64_t bytes = built.workspaceBytes;
    cache_.emplace(key, std::move(built));
    return bytes;
  }

  Status forward(const AttentionProblem& p, const void* q, const void* k, const void* v, void* out, float* lse,
                 void* workspace, int64_t workspaceBytes, cudaStream_t stream) override {
    if (p.backward)
      return Status::invalidArgument("CudnnAttention::forward called with the backward problem " +
                                     describeAttention(p))
          .withRank(rank_);
    using T = AttentionTensor;
    return run(p, {{T::kQ, q}, {T::kK, k}, {T::kV, v}, {T::kO, out}, {T::kStats, lse}}, workspace, workspaceBytes,
               stream);
  }

  Status backward(const AttentionProblem& p, const void* dout, const void* q, const void* k, const void* v,
                  const void* out, const float* lse, void* dq, void* dk, void* dv, void* workspace,
                  int64_t workspaceBytes, cudaStream_t stream) override {
    if (!p.backward)
      return Status::invalidArgument("CudnnAttention::backward called with the forward problem " +
                                     describeAttention(p))
          .withRank(rank_);
    using T = AttentionTensor;
    return run(p,
               {{T::kQ, q}, {T::kK, k}, {T::kV, v}, {T::kO, out}, {T::kStats, lse}, {T::kDO, dout}, {T::kDQ, dq},
                {T::kDK, dk}, {T::kDV, dv}},
               workspace, workspaceBytes, stream);
  }

  int64_t cachedGraphs() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return int64_t(cache_.size());
  }

private:
  static std::string context(const char* what, const AttentionProblem& p) {
    return std::string("cuDNN ") + what + " " + describeAttention(p) + " (cuDNN " +
           cudnnVersionName(cudnnGetVersion()) + ", frontend " + frontendVersionName() + ")";
  }

  // The frontend reports through error objects, but parts of it (and the STL below it) can throw: no
  // exception leaves this file.
  template <class Fn>
  static Status guarded(Fn&& fn) {
    try {
      return fn();
    } catch (const std::exception& e) {
      return Status::internal(std::string("the cuDNN frontend threw: ") + e.what());
    } catch (...) {
      return Status::internal("the cuDNN frontend threw a non-standard exception");
    }
  }

  // The graph of `p` and the workspace its chosen plan needs.
  Status build(const AttentionProblem& p, CachedGraph& out) {
    using T = AttentionTensor;
    auto graph = std::make_shared<fe::graph::Graph>();
    graph->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    const TensorPtr q = input(*graph, p, T::kQ), k = input(*graph, p, T::kK), v = input(*graph, p, T::kV);
    if (!p.backward) {
      fe::graph::SDPA_attributes options;
      options.set_name("llcdist_attention_fwd")
          .set_generate_stats(true)  // lse, natural log (stats_use_log2 stays false)
          .set_attn_scale(p.scale)
          .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
          .set_diagonal_band_right_bound(0);
      if (p.window > 0) options.set_diagonal_band_left_bound(int(p.window));  // key j > query i − window
      auto [o, stats] = graph->sdpa(q, k, v, options);
      if (!o || !stats) return Status::internal("Graph::sdpa returned no O or Stats tensor");
      output(o, p, T::kO);
      output(stats, p, T::kStats);
    } else {
      const TensorPtr o = input(*graph, p, T::kO), dO = input(*graph, p, T::kDO);
      const TensorPtr stats = input(*graph, p, T::kStats);
      fe::graph::SDPA_backward_attributes options;
      options.set_name("llcdist_attention_bwd")
          .set_attn_scale(p.scale)
          .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
          .set_diagonal_band_right_bound(0)
          .set_deterministic_algorithm(p.deterministic);
      if (p.window > 0) options.set_diagonal_band_left_bound(int(p.window));
      auto [dQ, dK, dV] = graph->sdpa_backward(q, k, v, o, dO, stats, options);
      if (!dQ || !dK || !dV) return Status::internal("Graph::sdpa_backward returned no dQ, dK or dV tensor");
      output(dQ, p, T::kDQ);
      output(dK, p, T::kDK);
      output(dV, p, T::kDV);
    }
    LLCDIST_FE_TRY("validate", graph->validate());
    LLCDIST_FE_TRY("build_operation_graph", graph->build_operation_graph(handle_));
    LLCDIST_FE_TRY("create_execution_plans", graph->create_execution_plans({fe::HeurMode_t::A}));
    LLCDIST_FE_TRY("check_support", graph->check_support(handle_));
    LLCDIST_FE_TRY("build_plans", graph->build_plans(handle_));
    int64_t bytes = 0;
    LLCDIST_FE_TRY("get_workspace_size", graph->get_workspace_size(bytes));
    if (bytes < 0) return Status::internal("get_workspace_size: " + std::to_string(bytes) + " bytes");
    out.graph = std::move(graph);
    out.workspaceBytes = bytes;
    return Status::ok();
  }

  // Checks the pointers and the workspace, then enqueues the cached graph of `p` on `stream`.
  Status run(const AttentionProblem& p, std::initializer_list<std::pair<AttentionTensor, const void*>> tensors,
             void* workspace, int64_t workspaceBytes, cudaStream_t stream) {
    const auto fail = [&](Status s) { return std::move(s).withContext(context("running", p)).withRank(rank_); };
    std::unordered_map<int64_t, void*> pack;
    for (const auto& [t, ptr] : tensors) {
      if (Status s = checkAttentionPointer(t, ptr); !s.isOk()) return fail(std::move(s));
      pack.emplace(uidOf(t), const_cast<void*>(ptr));  // the frontend's variant pack is non-const
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(attentionKey(p));
    if (it == cache_.end())
      return fail(Status::invalidArgument("the problem was not prepared (CudnnAttention::prepare at bind time)"));
    const CachedGraph& cached = it->second;
    if (workspaceBytes < cached.workspaceBytes || (cached.workspaceBytes > 0 && !workspace))
      return fail(Status::invalidArgument("the workspace holds " + std::to_string(workspace ? workspaceBytes : 0) +
                                          " bytes, the graph needs " + std::to_string(cached.workspaceBytes)));
    Status s = guarded([&]() -> Status {
      // The handle is shared by every call: its stream is set under the lock, right before the launch.
      LLCDIST_CUDNN_STATUS(cudnnSetStream(handle_, stream));
      LLCDIST_FE_TRY("execute", cached.graph->execute(handle_, pack, workspace));
      return Status::ok();
    });
    return s.isOk() ? s : fail(std::move(s));
  }

  const int rank_;
  const CudnnTarget target_;
  cudnnHandle_t handle_ = nullptr;
  mutable std::mutex mu_;  // guards the cache and the handle (its stream) during a call
  std::map<AttentionKey, CachedGraph> cache_;
};

}  // namespace

CudnnTarget cudnnAttentionTarget() {
  CudnnTarget t;
  t.smVersion = currentSmVersion(nullptr);
  t.cudnnVersion = int64_t(cudnnGetVersion());
  return t;
}

bool cudnnAttentionUsable(std::string* why) {
  std::string reason;  // stays "" while usable
  const int sm = currentSmVersion(&reason);
  const size_t version = cudnnGetVersion();
  if (!reason.empty()) {
    // no device: currentSmVersion said why
  } else if (sm < 80) {
    reason = "cuDNN SDPA needs compute capability 8.0 or newer, the device has " + std::to_string(sm / 10) + "." +
             std::to_string(sm % 10);
  } else if (version < 90000) {
    reason = "cuDNN " + cudnnVersionName(version) + " is loaded; cuDNN 9 is required";
  } else {
    cudnnHandle_t h = nullptr;
    const cudnnStatus_t s = cudnnCreate(&h);
    if (s != CUDNN_STATUS_SUCCESS)
      reason = std::string("cudnnCreate failed: ") + cudnnGetErrorString(s) + " (cuDNN " + cudnnVersionName(version) +
               ")";
    else
      cudnnDestroy(h);
  }
  if (why) *why = reason;
  return reason.empty();
}

StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::create(int rank) {
  std::string why;
  if (!cudnnAttentionUsable(&why)) return Status::notFound("cuDNN attention is not usable: " + why).withRank(rank);
  auto a = std::make_unique<FrontendAttention>(rank, cudnnAttentionTarget());
  if (Status s = a->init(); !s.isOk()) return std::move(s).withContext("cuDNN attention").withRank(rank);
  return std::unique_ptr<CudnnAttention>(std::move(a));
}

CudnnAttention::~CudnnAttention() = default;

}  // namespace llcdist::rt::cuda

#else  // !LLCDIST_HAVE_CUDNN_FRONTEND: the stub

namespace llcdist::rt::cuda {

namespace {
constexpr const char* kNoFrontend =
    "this build has no cuDNN frontend (scripts/setup-deps.sh puts its headers in .deps/cudnn-frontend; "
    "runtime/CMakeLists.txt also needs cuDNN, nvrtc and libcuda)";
}

bool cudnnAttentionUsable(std::string* why) {
  if (why) *why = kNoFrontend;
  return false;
}

CudnnTarget cudnnAttentionTarget() { return CudnnTarget{}; }

StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::create(int rank) {
  return Status::notFound(std::string("cuDNN attention: ") + kNoFrontend).withRank(rank);
}

CudnnAttention::~CudnnAttention() = default;

}  // namespace llcdist::rt::cuda

#endif
