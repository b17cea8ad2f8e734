// Private: parsing and validating one op of a program (roles, dtypes, attrs, element counts, aliasing).
#pragma once

#include "PlanJson.h"
#include "llcdist/runtime/Plan.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace llcdist::rt::planops {

// Parses ops[j] at `path` against PlanSchema's table; `prog` must already hold all buffers.
Status parseOp(const planjson::Doc& doc, const planjson::json& j, const std::string& path, const Program& prog,
               const Manifest& manifest, Op* out);

// Reused vectors of the alias check, so that checking many ops allocates only once.
struct AliasScratch {
  struct Use {
    size_t role, k;  // op.args[role][k]
    int64_t id, offset, bytes;  // the buffer, and its instance's bytes in the arena
  };
  std::vector<Use> uses;
  std::vector<size_t> byOffset, open;
};

// Actions' `slot`s (docs/plan-format.md "Microbatch slots"): an action running subroutines[s] in slot k
// needs every slotted buffer its ops use to have an instance k, and the aliasing rule to hold for each
// op on those instances. The result depends only on (s, k), so each pair is checked once, however many
// actions name it; and for a pair only what a slot can change is checked: the ops that touch a slotted
// buffer, and of those the argument pairs with a slotted buffer (an op or pair on unslotted buffers runs
// on the same bytes in every slot, which parseOp checked as slot 0). The error is the first that a scan
// of the subroutine's ops in order meets, each op's instances before its aliasing.
class SlotChecker {
public:
  // `prog` holds all buffers and subroutines, each op accepted by parseOp; it must outlive the checker.
  explicit SlotChecker(const Program& prog);
  // The action at `path` runs subroutines[subroutine] in `slot`.
  Status check(const planjson::Doc& doc, const std::string& path, size_t subroutine, int64_t slot);

private:
  // Two arguments of an op that may break the alias rule in some slot: both non-empty, at least one
  // written and one slotted.
  struct BufferPair {
    const BufferDesc *x, *y;  // in argument order
    bool exactAllowed;        // the schema allows them the exact same bytes
  };
  struct SlottedOp {
    size_t op;          // index in the subroutine's ops
    int64_t instances;  // the fewest instances of its slotted buffers
    bool sweep;         // too many arguments for pairs: findBadAlias checks each slot
    size_t pairsBegin, pairsEnd;  // its BufferPairs
  };
  struct SubroutineSlots {
    bool computed = false;
    std::vector<SlottedOp> ops;      // the ops that touch a slotted buffer, in order
    std::vector<BufferPair> pairs;
    int64_t instances = INT64_MAX;   // the fewest instances over ops
    std::vector<bool> checked;       // [slot]: accepted (slots below `instances` only)
  };
  SubroutineSlots& slotsOf(size_t subroutine);  // computed on first use

  const Program& prog_;
  std::vector<SubroutineSlots> subs_;
  AliasScratch scratch_;
};

}  // namespace llcdist::rt::planops
