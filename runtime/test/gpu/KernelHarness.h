// The GPU kernel tests' harness: one KernelCall built from host data is run by the CPU reference
// kernel (runCpuKernel) and by the CUDA backend's kernel-table entry on device copies of the same
// inputs, and every written role is compared elementwise: float roles with llm.c's tolerance,
// |gpu - cpu| <= atol + rtol·|cpu|; i32 roles (ids, slots, counts) exactly. bf16 arguments: the GPU
// kernel takes them as they are (its variant reads bf16); the CPU reference runs as the interpreter's
// staged path does (KernelVariant.h): each bf16 argument of a float role converted to f32 exactly, the
// f32 kernel, each written one rounded back to bf16, so both round at the same points and differ only by
// the order of f32 sums inside (a bf16 ulp, 2^-8 relative, where a rounding falls the other way). Tests
// skip (GTEST_SKIP, one line) when no CUDA device is present, so the suite runs everywhere and checks
// something only on a GPU (scripts/test-gpu.sh).
#pragma once

#include "llcdist/runtime/Bf16.h"
#include "llcdist/runtime/CpuBackend.h"

#include "cuda/CudaKernels.h"
#include "cuda/DeviceMemory.h"
#include "cuda/Gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace llcdist::rt::cuda::test {

// "" when a device is usable, else the reason (for GTEST_SKIP).
inline std::string noDeviceReason() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device (") + cudaGetErrorString(e) + ")";
  if (n == 0) return "no CUDA device";
  return "";
}
#define LLCDIST_REQUIRE_GPU()                                                        \
  do {                                                                               \
    const std::string llcdist_reason_ = ::llcdist::rt::cuda::test::noDeviceReason(); \
    if (!llcdist_reason_.empty()) GTEST_SKIP() << llcdist_reason_;                   \
  } while (0)

// Seeded inputs.
inline std::vector<float> randomF32(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}
inline std::vector<int32_t> randomI32(int64_t n, uint32_t seed, int32_t lo, int32_t hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> d(lo, hi);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = d(gen);
  return v;
}

class KernelCase {
 public:
  KernelCase(schema::OpKind kind, OpParams params) : kind_(kind), params_(std::move(params)) {
    const schema::OpSpec& spec = schema::opSpec(kind);
    bufs_.resize(spec.numArgs);
  }
  // One buffer of `role` (call again for the next buffer of a list role).
  KernelCase& f32(std::string_view role, const std::vector<float>& v) {
    return raw(role, schema::ElemType::kF32, v.data(), int64_t(v.size()), sizeof(float));
  }
  KernelCase& bf16(std::string_view role, const std::vector<float>& v) {
    std::vector<uint16_t> b(v.size());
    convertF32ToBf16(v.data(), b.data(), int64_t(v.size()));
    return raw(role, schema::ElemType::kBF16, b.data(), int64_t(b.size()), 2);
  }
  KernelCase& i32(std::string_view role, const std::vector<int32_t>& v) {
    return raw(role, schema::ElemType::kI32, v.data(), int64_t(v.size()), sizeof(int32_t));
  }
  KernelCase& f64(std::string_view role, const std::vector<double>& v) {
    return raw(role, schema::ElemType::kF64, v.data(), int64_t(v.size()), sizeof(double));
  }
  KernelCase& step(double lr, int64_t t) {
    step_ = StepValues{lr, t};
    return *this;
  }

  // Runs both kernels and compares every written (or read-written) role.
  void expectMatch(double atol, double rtol, std::string_view variant = {}) {
    std::vector<std::vector<Buf>> cpu = bufs_, gpu = bufs_;
    const std::vector<std::vector<bool>> staged = stageBf16(cpu);
    ASSERT_TRUE(runCpuKernel(callOn(cpu, nullptr, &staged)).isOk());
    roundBack(cpu, staged);
    ASSERT_NO_FATAL_FAILURE(runGpu(gpu, variant));
    const schema::OpSpec& spec = schema::opSpec(kind_);
    for (size_t r = 0; r < bufs_.size(); ++r) {
      if (spec.args[r].access == schema::ArgAccess::kRead) continue;
      for (size_t k = 0; k < bufs_[r].size(); ++k) compare(spec.args[r].role, k, cpu[r][k], gpu[r][k], atol, rtol);
    }
  }

 private:
  struct Buf {
    std::vector<std::byte> bytes;
    schema::ElemType type;
    int64_t elems;
  };
  KernelCase& raw(std::string_view role, schema::ElemType type, const void* p, int64_t elems, size_t size) {
    const size_t r = size_t(schema::argIndex(kind_, role));
    Buf b{std::vector<std::byte>(size_t(elems) * size), type, elems};
    std::memcpy(b.bytes.data(), p, b.bytes.size());
    bufs_[r].push_back(std::move(b));
    return *this;
  }
  // `staged`: the CPU reference's call, whose converted buffers are stored in bf16 (KernelCall::storedTypes).
  // `stepValues`: where the call reads the step's values (host memory for the CPU reference, device
  // memory for the GPU: KernelCall::stepValues).
  KernelCall callOn(std::vector<std::vector<Buf>>& bufs, const std::vector<std::vector<void*>>* ptrs = nullptr,
                    const std::vector<std::vector<bool>>* staged = nullptr, const StepValues* stepValues = nullptr) {
    KernelCall c;
    c.kind = kind_;
    c.params = params_;
    c.stepValues = stepValues ? stepValues : &step_;
    c.args.resize(bufs.size());
    c.argElems.resize(bufs.size());
    c.argTypes.resize(bufs.size());
    c.storedTypes.resize(bufs.size());
    for (size_t r = 0; r < bufs.size(); ++r)
      for (size_t k = 0; k < bufs[r].size(); ++k) {
        c.args[r].push_back(ptrs ? (*ptrs)[r][k] : bufs[r][k].bytes.data());
        c.argElems[r].push_back(bufs[r][k].elems);
        c.argTypes[r].push_back(bufs[r][k].type);
        c.storedTypes[r].push_back(staged && (*staged)[r][k] ? schema::ElemType::kBF16 : bufs[r][k].type);
      }
    return c;
  }
  // The staged path's conversions for the CPU reference: every bf16 buffer of a float role becomes its
  // exact f32 copy (zero, cast and load_microbatch take bf16 themselves). Returns which were converted.
  std::vector<std::vector<bool>> stageBf16(std::vector<std::vector<Buf>>& bufs) const {
    const schema::OpSpec& spec = schema::opSpec(kind_);
    std::vector<std::vector<bool>> staged(bufs.size());
    for (size_t r = 0; r < bufs.size(); ++r)
      for (Buf& b : bufs[r]) {
        const bool convert = !schema::handlesBf16Itself(kind_) && schema::isFloatRole(spec.args[r].type) &&
                             b.type == schema::ElemType::kBF16;
        staged[r].push_back(convert);
        if (!convert) continue;
        std::vector<std::byte> f(size_t(b.elems) * 4);
        convertBf16ToF32(reinterpret_cast<const uint16_t*>(b.bytes.data()), reinterpret_cast<float*>(f.data()),
                         b.elems);
        b.bytes = std::move(f);
        b.type = schema::ElemType::kF32;
      }
    return staged;
  }
  static void roundBack(std::vector<std::vector<Buf>>& bufs, const std::vector<std::vector<bool>>& staged) {
    for (size_t r = 0; r < bufs.size(); ++r)
      for (size_t k = 0; k < bufs[r].size(); ++k) {
        if (!staged[r][k]) continue;
        Buf& b = bufs[r][k];
        std::vector<std::byte> h(size_t(b.elems) * 2);
        convertF32ToBf16(reinterpret_cast<const float*>(b.bytes.data()), reinterpret_cast<uint16_t*>(h.data()),
                         b.elems);
        b.bytes = std::move(h);
        b.type = schema::ElemType::kBF16;
      }
  }
  void runGpu(std::vector<std::vector<Buf>>& bufs, std::string_view variant = {}) {
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    std::vector<std::vector<void*>> dev(bufs.size());
    for (size_t r = 0; r < bufs.size(); ++r)
      for (Buf& b : bufs[r]) {
        void* p = nullptr;
        ASSERT_EQ(cudaMalloc(&p, b.bytes.size() + 16), cudaSuccess);
        ASSERT_EQ(cudaMemcpy(p, b.bytes.data(), b.bytes.size(), cudaMemcpyHostToDevice), cudaSuccess);
        dev[r].push_back(p);
      }
    int* flag = nullptr;
    ASSERT_EQ(cudaMalloc(&flag, sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemset(flag, 0, sizeof(int)), cudaSuccess);
    StepValues* stepValues = nullptr;  // the optimizer updates read them on the device
    ASSERT_EQ(cudaMalloc(&stepValues, sizeof(StepValues)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(stepValues, &step_, sizeof(StepValues), cudaMemcpyHostToDevice), cudaSuccess);
    {
      StreamScratch scratch(stream, 0);
      TableCache tables(0);
      StatusOr<std::unique_ptr<GemmRunner>> gemm = makeGemmRunner(0);
      ASSERT_TRUE(gemm.isOk()) << gemm.status().toString();
      CudaKernelContext ctx;
      ctx.stream = stream;
      ctx.gemm = gemm->get();
      ctx.scratch = &scratch;
      ctx.tables = &tables;
      ctx.deviceError = flag;
      const CudaKernel* kernel = cudaKernel(kind_, variant);
      ASSERT_NE(kernel, nullptr) << schema::opName(kind_);
      const Status st = (*kernel)(callOn(bufs, &dev, nullptr, stepValues), ctx);
      ASSERT_TRUE(st.isOk()) << st.toString();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    }
    int code = -1;
    ASSERT_EQ(cudaMemcpy(&code, flag, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(code, 0) << "the kernel reported a device error";
    for (size_t r = 0; r < bufs.size(); ++r)
      for (size_t k = 0; k < bufs[r].size(); ++k) {
        ASSERT_EQ(cudaMemcpy(bufs[r][k].bytes.data(), dev[r][k], bufs[r][k].bytes.size(), cudaMemcpyDeviceToHost),
                  cudaSuccess);
        cudaFree(dev[r][k]);
      }
    cudaFree(flag);
    cudaFree(stepValues);
    cudaStreamDestroy(stream);
  }
  static double at(const Buf& b, int64_t i) {
    switch (b.type) {
      case schema::ElemType::kF32: {
        float v;
        std::memcpy(&v, b.bytes.data() + i * 4, 4);
        return v;
      }
      case schema::ElemType::kF64: {
        double v;
        std::memcpy(&v, b.bytes.data() + i * 8, 8);
        return v;
      }
      case schema::ElemType::kI32: {
        int32_t v;
        std::memcpy(&v, b.bytes.data() + i * 4, 4);
        return v;
      }
      case schema::ElemType::kBF16: {
        uint16_t h;
        std::memcpy(&h, b.bytes.data() + i * 2, 2);
        float v;
        convertBf16ToF32(&h, &v, 1);
        return v;
      }
    }
    return 0;
  }
  // Float roles within atol + rtol·|cpu| (NaN matches NaN); i32 roles exactly.
  static void compare(std::string_view role, size_t k, const Buf& cpu, const Buf& gpu, double atol, double rtol) {
    const bool exact = cpu.type == schema::ElemType::kI32;
    int64_t bad = 0;
    for (int64_t i = 0; i < cpu.elems; ++i) {
      const double c = at(cpu, i), g = at(gpu, i);
      const bool ok =
          exact ? g == c : g == c || (std::isnan(c) && std::isnan(g)) || std::fabs(g - c) <= atol + rtol * std::fabs(c);
      if (ok || bad++ >= 5) continue;
      if (exact)
        ADD_FAILURE() << role << "[" << k << "][" << i << "]: gpu " << g << " vs cpu " << c << " (i32: exact)";
      else
        ADD_FAILURE() << role << "[" << k << "][" << i << "]: gpu " << g << " vs cpu " << c << " (atol " << atol
                      << ", rtol " << rtol << ")";
    }
    EXPECT_EQ(bad, 0) << role << "[" << k << "]: " << bad << " of " << cpu.elems << " elements differ";
  }

  schema::OpKind kind_;
  OpParams params_;
  StepValues step_;
  std::vector<std::vector<Buf>> bufs_;
};

}  // namespace llcdist::rt::cuda::test
