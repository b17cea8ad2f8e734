// The Backend interface's defaults (Backend.h): one f32 kernel per kind, host-clock time marks, no
// device graphs.
#include "llcdist/runtime/Backend.h"

#include "llcdist/runtime/Timeline.h"

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
