// Test helper: a Backend that forwards every call to another one (the CPU backend, usually), so a test
// backend overrides only the calls it records or changes (AsyncPlanTest's RecordingBackend,
// KernelVariantTest's bf16-native kernel).
#pragma once

#include "llcdist/runtime/Backend.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace llcdist::rt::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return inner_->name(); }
  Status allocateArena(int64_t b) override { return inner_->allocateArena(b); }
  std::byte* arenaAt(int64_t o) override { return inner_->arenaAt(o); }
  int64_t arenaBytes() const override { return inner_->arenaBytes(); }
  int64_t peakAllocatedBytes() const override { return inner_->peakAllocatedBytes(); }
  StatusOr<float*> allocateStaging(int64_t e) override { return inner_->allocateStaging(e); }
  StatusOr<void*> allocateHostInput(int64_t b) override { return inner_->allocateHostInput(b); }
  StatusOr<Stream> createStream() override { return inner_->createStream(); }
  StatusOr<Event> createEvent() override { return inner_->createEvent(); }
  Status recordEvent(Stream s, Event e) override { return inner_->recordEvent(s, e); }
  Status waitEvent(Stream s, Event e) override { return inner_->waitEvent(s, e); }
  Status synchronize() override { return inner_->synchronize(); }
  Status copyToDevice(Stream s, int64_t o, const void* p, int64_t b) override {
    return inner_->copyToDevice(s, o, p, b);
  }
  Status copyToHost(Stream s, void* p, int64_t o, int64_t b) override { return inner_->copyToHost(s, p, o, b); }
  Status fillZero(Stream s, int64_t o, int64_t b) override { return inner_->fillZero(s, o, b); }
  Status copyHostInput(Stream s, void* d, const void* p, int64_t b) override {
    return inner_->copyHostInput(s, d, p, b);
  }
  bool canCaptureGraph(std::string* why) const override { return inner_->canCaptureGraph(why); }
  Status beginGraphCapture() override { return inner_->beginGraphCapture(); }
  StatusOr<int> endGraphCapture() override { return inner_->endGraphCapture(); }
  Status launchGraph(int g) override { return inner_->launchGraph(g); }
  Status launchHostFunc(Stream s, std::function<void()> f) override { return inner_->launchHostFunc(s, std::move(f)); }
  Status launch(Stream s, const KernelCall& c) override { return inner_->launch(s, c); }
  bool hasKernel(schema::OpKind k) const override { return inner_->hasKernel(k); }
  std::vector<const KernelVariantInfo*> kernelVariants(schema::OpKind k) const override {
    return inner_->kernelVariants(k);
  }
  KernelSelectOptions kernelSelectOptions() const override { return inner_->kernelSelectOptions(); }
  Status prepare(const KernelCall& c) override { return inner_->prepare(c); }
  StatusOr<int64_t> markTime(Stream s) override { return inner_->markTime(s); }
  StatusOr<int64_t> markTimeNs(int64_t m) override { return inner_->markTimeNs(m); }
  void clearTimeMarks() override { inner_->clearTimeMarks(); }
  StatusOr<Channel> createChannel(const std::vector<int>& g) override { return inner_->createChannel(g); }
  Status connect() override { return inner_->connect(); }
  StatusOr<CollectiveHandle> allReduceAsync(Stream s, void* b, int64_t n, CommDType d, ReduceOp op,
                                            Channel c) override {
    return inner_->allReduceAsync(s, b, n, d, op, c);
  }
  StatusOr<CollectiveHandle> allGatherAsync(Stream s, const void* i, void* o, int64_t a, int64_t b, int64_t t,
                                            CommDType d, Channel c) override {
    return inner_->allGatherAsync(s, i, o, a, b, t, d, c);
  }
  StatusOr<CollectiveHandle> reduceScatterAsync(Stream s, const void* i, void* o, int64_t a, int64_t b, int64_t t,
                                                CommDType d, ReduceOp op, Channel c) override {
    return inner_->reduceScatterAsync(s, i, o, a, b, t, d, op, c);
  }
  StatusOr<CollectiveHandle> allToAllAsync(Stream s, const void* x, void* y, int64_t o, int64_t m, int64_t i, int r,
                                           CommDType d, Channel c) override {
    return inner_->allToAllAsync(s, x, y, o, m, i, r, d, c);
  }
  StatusOr<CollectiveHandle> allToAllVAsync(Stream s, const void* x, int64_t xr, const int32_t* ss, void* y, int64_t yr,
                                            int32_t* rs, int64_t k, int64_t w, CommDType d, Channel c) override {
    return inner_->allToAllVAsync(s, x, xr, ss, y, yr, rs, k, w, d, c);
  }
  StatusOr<CollectiveHandle> sendAsync(Stream s, const void* x, int64_t n, CommDType d, int p, int64_t t,
                                       int64_t m) override {
    return inner_->sendAsync(s, x, n, d, p, t, m);
  }
  StatusOr<CollectiveHandle> recvAsync(Stream s, void* y, int64_t n, CommDType d, int p, int64_t t,
                                       int64_t m) override {
    return inner_->recvAsync(s, y, n, d, p, t, m);
  }
  Status waitCollective(Stream s, CollectiveHandle h) override { return inner_->waitCollective(s, h); }
  bool collectiveDone(CollectiveHandle h) override { return inner_->collectiveDone(h); }

 protected:
  std::unique_ptr<Backend> inner_;
};

}  // namespace llcdist::rt::testing
