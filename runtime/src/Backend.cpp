// The Backend interface's defaults (Backend.h): one f32 kernel per kind, host-clock time marks, no
// device graphs.
#include "llcdist/runtime/Backend.h"

#include "llcdist/runtime/Timeline.h"

#include <cstring>

namespace llcdist::rt {

std::vector<const KernelVariantInfo*> Backend::kernelVariants(schema::OpKind kind) const {
  if (!hasKernel(kind)) return {};
  return {&f32KernelVariant()};
}

StatusOr<int64_t> Backend::markTime(Stream stream) {
  (void)stream;
  hostMarks_.push_back(Timeline::nowNs());
  return int64_t(hostMarks_.size()) - 1;
}

StatusOr<int64_t> Backend::markTimeNs(int64_t mark) {
  if (mark < 0 || mark >= int64_t(hostMarks_.size()))
    return Status::outOfRange("time mark " + std::to_string(mark) + " was not made (or was cleared)");
  return hostMarks_[size_t(mark)];
}

Status Communicator::allToAll(int rank, const std::vector<int>& group, const void*, void*, int64_t, CommDType) {
  (void)group;
  return Status::invalidArgument("rank " + std::to_string(rank) + ": this communicator has no all_to_all");
}

StatusOr<CollectiveHandle> Backend::allToAllAsync(Stream, const void*, void*, int64_t, int64_t, int64_t, int, CommDType,
                                                  Channel) {
  return Status::invalidArgument("the " + name() + " backend has no all_to_all");
}

std::vector<StridedCopy> allToAllCopies(int64_t n, int64_t outer, int64_t mid, int64_t inner, int rankDim,
                                        int64_t elemBytes, bool pack) {
  const int64_t blockBytes = outer * mid * inner * elemBytes;
  std::vector<StridedCopy> copies;
  for (int64_t j = 0; j < n; ++j) {
    StridedCopy c;
    int64_t tensorOffset = 0, tensorPitch = 0;
    if (rankDim == 2) {  // [outer, mid, n, inner]: a row per (o, m) of inner elements
      c.rows = outer * mid;
      c.width = inner * elemBytes;
      tensorOffset = j * inner * elemBytes;
      tensorPitch = n * inner * elemBytes;
    } else {  // [outer, n, mid, inner]: a row per o of mid·inner elements
      c.rows = outer;
      c.width = mid * inner * elemBytes;
      tensorOffset = j * mid * inner * elemBytes;
      tensorPitch = n * mid * inner * elemBytes;
    }
    const int64_t blockOffset = j * blockBytes, blockPitch = c.width;
    c.srcOffset = pack ? tensorOffset : blockOffset;
    c.srcPitch = pack ? tensorPitch : blockPitch;
    c.dstOffset = pack ? blockOffset : tensorOffset;
    c.dstPitch = pack ? blockPitch : tensorPitch;
    copies.push_back(c);
  }
  return copies;
}

void runStridedCopies(const std::vector<StridedCopy>& copies, const void* src, void* dst) {
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  for (const StridedCopy& c : copies)
    for (int64_t r = 0; r < c.rows && c.width > 0; ++r)
      std::memcpy(out + c.dstOffset + r * c.dstPitch, in + c.srcOffset + r * c.srcPitch, size_t(c.width));
}

bool Backend::canCaptureGraph(std::string* why) const {
  if (why) *why = "the " + name() + " backend has no device graphs";
  return false;
}

Status Backend::beginGraphCapture() {
  return Status::invalidArgument("the " + name() + " backend cannot capture a device graph");
}

StatusOr<int> Backend::endGraphCapture() {
  return Status::invalidArgument("the " + name() + " backend cannot capture a device graph");
}

Status Backend::launchGraph(int graph) {
  return Status::invalidArgument("the " + name() + " backend has no device graph " + std::to_string(graph));
}

}  // namespace llcdist::rt
