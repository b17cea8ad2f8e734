// A table indexed by op kind: one entry per op kind of the plan schema (PlanSchema.h), registered by
// the kernel families (docs/adding-an-op.md). The core's op definitions (src/ops/OpDefs.h: checker
// and binder per kind) and each backend's kernels (the CPU backend's: CpuBackend.h) are such tables,
// so a new backend registers its own entries instead of copying a dispatch switch, and check() at
// start-up (and a unit test) names every kind that has none.
#pragma once

#include "llcdist/runtime/PlanSchema.h"
#include "llcdist/runtime/Status.h"

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llcdist::rt {

template <class Entry>
class KernelTable {
public:
  explicit KernelTable(std::string name) : name_(std::move(name)) {}

  // Registers the entry of `kind`; a second registration of one kind is reported by check().
  void add(schema::OpKind kind, Entry entry) {
    std::optional<Entry>& slot = entries_[size_t(kind)];
    if (slot) duplicates_.push_back(kind);
    slot = std::move(entry);
  }
  // For a table whose Entry is a list (a kind's kernel variants, in preference order: CudaKernels.h):
  // appends `item` to the kind's list, creating it.
  template <class Item>
  void append(schema::OpKind kind, Item item) {
    std::optional<Entry>& slot = entries_[size_t(kind)];
    if (!slot) slot.emplace();
    slot->push_back(std::move(item));
  }
  // The entry of `kind`, or null when none was registered.
  const Entry* find(schema::OpKind kind) const {
    const std::optional<Entry>& slot = entries_[size_t(kind)];
    return slot ? &*slot : nullptr;
  }

  // Kinds for which `required(kind)` holds and that have no entry, in OpKind order.
  template <class Pred>
  std::vector<schema::OpKind> missing(Pred required) const {
    std::vector<schema::OpKind> out;
    for (size_t i = 0; i < schema::kNumOpKinds; ++i)
      if (required(schema::OpKind(i)) && !entries_[i]) out.push_back(schema::OpKind(i));
    return out;
  }
  // Kinds with an entry for which `required(kind)` does not hold (entries nobody calls).
  template <class Pred>
  std::vector<schema::OpKind> unexpected(Pred required) const {
    std::vector<schema::OpKind> out;
    for (size_t i = 0; i < schema::kNumOpKinds; ++i)
      if (!required(schema::OpKind(i)) && entries_[i]) out.push_back(schema::OpKind(i));
    return out;
  }

  // Ok when exactly the kinds with `required(kind)` have one entry each; otherwise an Internal error
  // naming the table and every missing, unexpected and twice-registered kind.
  template <class Pred>
  Status check(Pred required) const {
    std::string msg;
    auto names = [](const char* what, const std::vector<schema::OpKind>& kinds, std::string* m) {
      if (kinds.empty()) return;
      *m += std::string(m->empty() ? "" : "; ") + what + ":";
      for (schema::OpKind k : kinds) *m += " " + std::string(schema::opName(k));
    };
    names("no entry for", missing(required), &msg);
    names("an entry for the non-kernel op", unexpected(required), &msg);
    names("registered twice", duplicates_, &msg);
    if (msg.empty()) return Status::ok();
    return Status::internal(name_ + ": " + msg + " (docs/adding-an-op.md)");
  }
  Status check() const {
    return check([](schema::OpKind) { return true; });
  }

  const std::string& name() const { return name_; }

private:
  std::string name_;
  std::array<std::optional<Entry>, schema::kNumOpKinds> entries_;
  std::vector<schema::OpKind> duplicates_;
};

}  // namespace llcdist::rt
