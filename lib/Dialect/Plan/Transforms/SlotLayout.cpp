//===- SlotLayout.cpp - a pipeline's slotted instances by pattern ---------===//
#include "SlotLayout.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>

using namespace mlir;
using namespace llcdist::plan;
using namespace llcdist::plan::memory;

namespace {
/// Whether a layout (`at`, `sizes`) keeps buffers apart that are live at
/// once: `segs[j]` are buffer j's segments.
bool disjointWhereLive(ArrayRef<ArrayRef<Segment>> segs, ArrayRef<int64_t> at, ArrayRef<int64_t> sizes) {
  struct Live {
    int64_t first, last;
    size_t buf;
  };
  std::vector<Live> all, active;
  for (size_t j = 0; j < segs.size(); ++j)
    for (const Segment &s : segs[j])
      all.push_back({s.first, s.last, j});
  llvm::sort(all, [](const Live &x, const Live &y) { return x.first < y.first; });
  for (const Live &s : all) {
    llvm::erase_if(active, [&](const Live &a) { return a.last < s.first; });
    for (const Live &a : active)
      if (a.buf != s.buf && at[a.buf] < at[s.buf] + sizes[s.buf] && at[s.buf] < at[a.buf] + sizes[a.buf])
        return false;
    active.push_back(s);
  }
  return true;
}

/// Merges `segs` (any order) into disjoint sorted segments.
SmallVector<Segment, 2> merged(SmallVector<Segment, 2> segs) {
  llvm::sort(segs, [](const Segment &x, const Segment &y) { return x.first < y.first; });
  SmallVector<Segment, 2> out;
  for (const Segment &s : segs)
    if (!out.empty() && s.first <= out.back().last + 1)
      out.back().last = std::max(out.back().last, s.last);
    else
      out.push_back(s);
  return out;
}
/// A block's layout: its buffers' offsets in it (laid out like a program's
/// transients, from `segs`), and its size.
struct BlockLayout {
  std::vector<int64_t> at;
  int64_t bytes = 0;
};
BlockLayout layOutBlock(ArrayRef<ArrayRef<Segment>> segs, ArrayRef<int64_t> sizes, int64_t kernels) {
  BlockLayout b{placeTransient(segs, sizes, liveBytesPeak(kernels, segs, sizes).first), 0};
  for (size_t j = 0; j < sizes.size(); ++j)
    b.bytes = std::max(b.bytes, b.at[j] + sizes[j]);
  return b;
}

/// The item that places slot `slot` (-1: every slot's) of block `block`.
Item blockItem(int64_t block, int64_t slot, ArrayRef<Segment> segs, int64_t bytes) {
  Item item;
  item.slot = slot;
  item.segs = segs;
  item.bytes = bytes;
  item.block = block;
  return item;
}

/// From the first kernel of `segs` (all of them, any order) to the last.
Segment hullOf(ArrayRef<ArrayRef<Segment>> segs) {
  Segment h{std::numeric_limits<int64_t>::max(), -1};
  for (ArrayRef<Segment> l : segs)
    for (const Segment &seg : l)
      h = {std::min(h.first, seg.first), std::max(h.last, seg.last)};
  return h;
}

/// Where a slotted buffer's segments run, segment by segment: `local` while
/// each begins and ends in one action, `chunk` the model chunk of all their
/// actions (-2: none yet; -3: several). add() is false for a segment end
/// outside every action (`actionOf` gives -1).
struct SegmentReach {
  bool local = true;
  int64_t chunk = -2;
  template <typename ActionOf> bool add(const Segment &s, ActionOf actionOf, ArrayRef<ActionSpan> spans) {
    int64_t a = actionOf(s.first), e = actionOf(s.last);
    if (a < 0 || e < 0)
      return false;
    local &= a == e;
    for (int64_t c : {spans[a].chunk, spans[e].chunk})
      chunk = chunk == -2 || chunk == c ? c : -3;
    return true;
  }
};

/// The most slots of `chunk` in flight at once: those whose actions' hull
/// (first to last kernel) covers a kernel.
int64_t slotsInFlight(ArrayRef<ActionSpan> spans, int64_t chunk) {
  std::map<int64_t, Segment> hull; // slot -> its actions' kernels
  for (const ActionSpan &a : spans)
    if (a.chunk == chunk) {
      auto [it, fresh] = hull.try_emplace(a.slot, Segment{a.first, a.last});
      it->second = {std::min(it->second.first, a.first), std::max(it->second.last, a.last)};
    }
  std::vector<std::pair<int64_t, int>> events;
  for (auto &[slot, h] : hull) {
    events.push_back({h.first, 1});
    events.push_back({h.last + 1, -1});
  }
  llvm::sort(events);
  int64_t now = 0, most = 0;
  for (auto [t, d] : events)
    most = std::max(most, now += d);
  return most;
}

/// Which of a chunk's workspace buffers (`cands`: slot 0's segments, bytes
/// and place in the program) go into its slot block instead (`adopt`):
/// largest first (ties: by place), one whose bytes fit beside
/// what the block holds at its times within the block's live peak goes in,
/// and one that raises that peak by g goes in when the blocks in flight at
/// once (`inFlight`) grow by less than its bytes (inFlight x g < bytes). `members` are the block's
/// buffers (slot 0's segments and bytes). The indices into `cands`, ascending.
std::vector<size_t> adoptedWorkspace(ArrayRef<ArrayRef<Segment>> members, ArrayRef<int64_t> memberBytes,
                                     ArrayRef<ArrayRef<Segment>> cands, ArrayRef<int64_t> candBytes,
                                     ArrayRef<int64_t> candIndex, int64_t inFlight) {
  Segment span = hullOf(members);
  Segment c = hullOf(cands);
  span = {std::min(span.first, c.first), std::max(span.last, c.last)};
  if (span.last < span.first)
    return {};
  // The bytes slot 0's block holds at each kernel of the span.
  std::vector<int64_t> live(size_t(span.last - span.first + 2), 0);
  for (auto [j, segs] : llvm::enumerate(members))
    for (const Segment &s : segs) {
      live[size_t(s.first - span.first)] += memberBytes[j];
      live[size_t(s.last - span.first + 1)] -= memberBytes[j];
    }
  std::partial_sum(live.begin(), live.end(), live.begin());
  int64_t peak = *std::max_element(live.begin(), live.end());
  std::vector<size_t> order(cands.size()), adopted;
  std::iota(order.begin(), order.end(), 0);
  llvm::sort(order, [&](size_t x, size_t y) {
    return std::make_pair(-candBytes[x], candIndex[x]) < std::make_pair(-candBytes[y], candIndex[y]);
  });
  for (size_t i : order) {
    int64_t top = 0;
    for (const Segment &s : cands[i])
      for (int64_t k = s.first; k <= s.last; ++k)
        top = std::max(top, live[size_t(k - span.first)] + candBytes[i]);
    if (inFlight * std::max<int64_t>(top - peak, 0) >= candBytes[i])
      continue;
    for (const Segment &s : cands[i])
      for (int64_t k = s.first; k <= s.last; ++k)
        live[size_t(k - span.first)] += candBytes[i];
    peak = std::max(peak, top);
    adopted.push_back(i);
  }
  llvm::sort(adopted);
  return adopted;
}

/// Drops the workspace buffers a slot block took (`taken`), and the groups
/// left empty.
template <typename Workspaces, typename Taken> void dropTaken(Workspaces &workspaces, Taken taken) {
  for (auto it = workspaces.begin(); it != workspaces.end();) {
    llvm::erase_if(it->second, taken);
    it = it->second.empty() ? workspaces.erase(it) : std::next(it);
  }
}
} // namespace

namespace {
/// layoutSlots' work: the program's kernels mapped to the actions they run
/// in, then the slotted buffers classified (a chunk's block, or a
/// workspace), then each block laid out. Each step returns false where the
/// pattern does not hold (the whole program falls back to per-instance
/// placement).
class SlotLayoutBuilder {
public:
  SlotLayoutBuilder(ArrayRef<Transient> instances, const llvm::DenseMap<StringAttr, int64_t> &slotsOf,
                    ArrayRef<ActionSpan> spans, int64_t kernels, bool adopt)
      : instances(instances), slotsOf(slotsOf), spans(spans), kernels(kernels), adopt(adopt) {
    // The action of each kernel, looked up per segment end (the spans tile
    // the step in order, so this is the last span beginning at or before it).
    actionAt.assign(std::max<int64_t>(kernels, 0), -1);
    for (auto [a, span] : llvm::enumerate(spans))
      for (int64_t k = std::max<int64_t>(span.first, 0); k <= span.last && k < kernels; ++k)
        actionAt[k] = int64_t(a);
    // A kernel's place in its slot's run of the chunk: (the action's rank
    // among the actions of its chunk and slot, the kernel's index in it).
    ordinal.resize(spans.size());
    std::map<std::pair<int64_t, int64_t>, int64_t> seen; // (chunk, slot) -> actions so far
    for (auto [a, span] : llvm::enumerate(spans))
      ordinal[a] = seen[{span.chunk, span.slot}]++;
  }

  SlotLayout perInstance() const {
    SlotLayout all;
    for (const Transient &tr : instances)
      all.items.push_back({tr.buf, tr.slot, tr.segs, tr.bytes});
    return all;
  }

  SlotLayout build() {
    if (!classify() || !adoptWorkspace() || !layOutChunks() || !layOutWorkspaces())
      return perInstance();
    return std::move(out);
  }

private:
  int64_t actionOf(int64_t time) const {
    if (time >= 0 && time < kernels && actionAt[time] >= 0)
      return actionAt[time];
    auto it =
        std::upper_bound(spans.begin(), spans.end(), time, [](int64_t v, const ActionSpan &a) { return v < a.first; });
    return it - spans.begin() - 1;
  }
  std::pair<int64_t, int64_t> placeOf(int64_t time) const {
    int64_t a = actionOf(time);
    return std::make_pair(ordinal[a], time - spans[a].first);
  }
  /// Two slots whose buffers' segments begin and end at the same places
  /// overlap alike (the order of the places is that of the times).
  bool sameShape(ArrayRef<ArrayRef<Segment>> x, ArrayRef<ArrayRef<Segment>> y) const {
    for (size_t j = 0; j < x.size(); ++j) {
      if (x[j].size() != y[j].size())
        return false;
      for (size_t i = 0; i < x[j].size(); ++i)
        if (placeOf(x[j][i].first) != placeOf(y[j][i].first) || placeOf(x[j][i].last) != placeOf(y[j][i].last))
          return false;
    }
    return true;
  }

  /// The slotted buffers' instances by buffer, in order of first use, each
  /// buffer in its chunk's block or (used within single actions) in a
  /// workspace; the others are items of their own.
  bool classify() {
    for (const Transient &tr : instances) {
      if (!slotsOf.count(tr.buf.getSymNameAttr())) {
        out.items.push_back({tr.buf, 0, tr.segs, tr.bytes});
        continue;
      }
      slotted[tr.buf.getSymNameAttr()].push_back(&tr);
    }
    for (auto &[name, insts] : slotted) {
      BufferOp buf = insts.front()->buf;
      SegmentReach reach;
      auto action = [this](int64_t time) { return actionOf(time); };
      for (const Transient *tr : insts)
        for (const Segment &s : tr->segs)
          if (!reach.add(s, action, spans))
            return false;
      const int64_t chunk = reach.chunk;
      if (reach.local) {
        SmallVector<Segment, 2> all;
        for (const Transient *tr : insts)
          all.append(tr->segs.begin(), tr->segs.end());
        llvm::sort(all, [](const Segment &x, const Segment &y) { return x.first < y.first; });
        for (size_t i = 1; i < all.size(); ++i)
          if (all[i].first <= all[i - 1].last)
            return false; // two slots' segments overlap: not a workspace
        std::vector<int64_t> actions;
        for (const Segment &seg : all)
          if (actions.empty() || actions.back() != actionOf(seg.first))
            actions.push_back(actionOf(seg.first));
        workspaces[actions].push_back({buf, std::move(all), chunk});
        continue;
      }
      if (chunk < 0)
        return false;
      chunks[chunk].push_back(buf);
    }
    return true;
  }

  /// With `adopt`: the workspace buffers each chunk's slot block takes
  /// (adoptedWorkspace) move into it, the block's buffers in order of first
  /// use (ties: by place).
  bool adoptWorkspace() {
    if (!adopt)
      return true;
    auto slot0 = [&](BufferOp buf) -> ArrayRef<Segment> {
      for (const Transient *tr : slotted[buf.getSymNameAttr()])
        if (tr->slot == 0)
          return tr->segs;
      return {};
    };
    for (auto &[chunk, bufs] : chunks) {
      const int64_t slots = slotsOf.lookup(bufs.front().getSymNameAttr());
      std::vector<ArrayRef<Segment>> segs, candSegs;
      std::vector<int64_t> bytes, candBytes, candIndex;
      for (BufferOp buf : bufs) {
        segs.push_back(slot0(buf));
        bytes.push_back(aligned(buf.getNumBytes()));
      }
      std::vector<Workspace *> cands;
      for (auto &[actions, members] : workspaces)
        for (Workspace &m : members) {
          if (!m.buf || m.chunk != chunk || slotsOf.lookup(m.buf.getSymNameAttr()) != slots)
            continue;
          if (ArrayRef<Segment> s0 = slot0(m.buf); !s0.empty()) {
            cands.push_back(&m);
            candSegs.push_back(s0);
            candBytes.push_back(aligned(m.buf.getNumBytes()));
            candIndex.push_back(slotted[m.buf.getSymNameAttr()].front()->index);
          }
        }
      for (size_t i : adoptedWorkspace(segs, bytes, candSegs, candBytes, candIndex, slotsInFlight(spans, chunk))) {
        bufs.push_back(cands[i]->buf);
        cands[i]->buf = BufferOp(); // taken
        ++out.adopted;
      }
      // By first use over every slot (ties: by place), as the pattern orders them.
      llvm::DenseMap<StringAttr, std::pair<int64_t, int64_t>> key;
      for (BufferOp buf : bufs) {
        int64_t first = std::numeric_limits<int64_t>::max();
        for (const Transient *tr : slotted[buf.getSymNameAttr()])
          first = std::min(first, tr->segs.front().first);
        key[buf.getSymNameAttr()] = {first, slotted[buf.getSymNameAttr()].front()->index};
      }
      llvm::stable_sort(bufs, [&](BufferOp x, BufferOp y) {
        return key.lookup(x.getSymNameAttr()) < key.lookup(y.getSymNameAttr());
      });
    }
    dropTaken(workspaces, [](const Workspace &m) { return !m.buf; });
    return true;
  }

  /// One block per chunk, laid out from slot 0's lifetimes and checked on
  /// every slot.
  bool layOutChunks() {
    for (auto &[chunk, bufs] : chunks) {
      const int64_t id = chunk;
      const int64_t slots = slotsOf.lookup(bufs.front().getSymNameAttr());
      // Each buffer's segments per slot.
      std::vector<std::vector<ArrayRef<Segment>>> segsOf(slots, std::vector<ArrayRef<Segment>>(bufs.size()));
      for (auto [j, buf] : llvm::enumerate(bufs)) {
        if (slotsOf.lookup(buf.getSymNameAttr()) != slots)
          return false;
        for (const Transient *tr : slotted[buf.getSymNameAttr()])
          segsOf[tr->slot][j] = tr->segs;
      }
      std::vector<int64_t> sizes;
      for (BufferOp buf : bufs)
        sizes.push_back(aligned(buf.getNumBytes()));
      // Slot 0's lifetimes give the layout; a buffer it never uses has none.
      if (llvm::any_of(segsOf[0], [](ArrayRef<Segment> s) { return s.empty(); }))
        return false;
      const auto [at, blockBytes] = layOutBlock(segsOf[0], sizes, kernels);
      // The layout holds on every slot: buffers live at once are disjoint.
      for (int64_t k = 0; k < slots; ++k) {
        if (k > 0 && !sameShape(segsOf[k], segsOf[0]) && !disjointWhereLive(segsOf[k], at, sizes))
          return false;
        // The block of slot k: live while any of its buffers is.
        SmallVector<Segment, 2> all;
        for (size_t j = 0; j < bufs.size(); ++j)
          all.append(segsOf[k][j].begin(), segsOf[k][j].end());
        if (all.empty())
          continue; // a slot no action uses: its instances share slot 0's bytes
        out.items.push_back(blockItem(id, k, out.storage.emplace_back(merged(std::move(all))), blockBytes));
      }
      for (auto [j, buf] : llvm::enumerate(bufs))
        out.inBlock[buf.getSymNameAttr()] = {id, at[j]};
    }
    return true;
  }

  /// A chunk's workspace buffers by the actions they live in (those of one
  /// subroutine, usually): each set is one workspace block, laid out from
  /// its first action and live over each action's span of its buffers.
  bool layOutWorkspaces() {
    int64_t nextWorkspace = kWorkspaceBlocks;
    for (auto &[actions, members] : workspaces) {
      const int64_t id = nextWorkspace++;
      // Each member's segments per action (actions in order).
      std::vector<std::vector<SmallVector<Segment, 2>>> per(actions.size(),
                                                            std::vector<SmallVector<Segment, 2>>(members.size()));
      for (auto [j, m] : llvm::enumerate(members))
        for (const Segment &seg : m.segs) {
          size_t a = std::lower_bound(actions.begin(), actions.end(), actionOf(seg.first)) - actions.begin();
          per[a][j].push_back(seg);
        }
      auto inAction = [&](size_t a) {
        std::vector<ArrayRef<Segment>> l;
        for (auto &segs : per[a])
          l.push_back(segs);
        return l;
      };
      std::vector<int64_t> sizes;
      for (Workspace &m : members)
        sizes.push_back(aligned(m.buf.getNumBytes()));
      std::vector<ArrayRef<Segment>> first = inAction(0);
      if (llvm::any_of(first, [](ArrayRef<Segment> l) { return l.empty(); }))
        return false;
      const auto [at, blockBytes] = layOutBlock(first, sizes, kernels);
      SmallVector<Segment, 2> &hulls = out.storage.emplace_back();
      // An action whose members' segments sit where the first's do (relative
      // to the action's start) overlaps alike.
      auto likeFirst = [&](size_t a) {
        for (size_t j = 0; j < members.size(); ++j) {
          if (per[a][j].size() != per[0][j].size())
            return false;
          for (size_t i = 0; i < per[a][j].size(); ++i)
            if (per[a][j][i].first - spans[actions[a]].first != per[0][j][i].first - spans[actions[0]].first ||
                per[a][j][i].last - spans[actions[a]].first != per[0][j][i].last - spans[actions[0]].first)
              return false;
        }
        return true;
      };
      for (size_t a = 0; a < actions.size(); ++a) {
        std::vector<ArrayRef<Segment>> l = inAction(a);
        if (a > 0 && !likeFirst(a) && !disjointWhereLive(l, at, sizes))
          return false;
        hulls.push_back(hullOf(l));
      }
      out.items.push_back(blockItem(id, -1, hulls, blockBytes));
      for (auto [j, m] : llvm::enumerate(members))
        out.inBlock[m.buf.getSymNameAttr()] = {id, at[j], /*shared=*/true};
    }
    return true;
  }

  struct Workspace {
    BufferOp buf;
    SmallVector<Segment, 2> segs; // sorted
    int64_t chunk;
  };

  ArrayRef<Transient> instances;
  const llvm::DenseMap<StringAttr, int64_t> &slotsOf;
  ArrayRef<ActionSpan> spans;
  int64_t kernels;
  bool adopt;
  std::vector<int64_t> actionAt, ordinal;
  SlotLayout out;
  llvm::MapVector<StringAttr, SmallVector<const Transient *, 4>> slotted;
  // One block per chunk. (Blocks per chunk and life — by the kinds and
  // places of the actions that write a buffer first and read it last —
  // come closer to the live peak but fragment the arena more: llama3-8b
  // tp=8 pp=4 ZB-H1 1.005x -> 1.065x.)
  std::map<int64_t, SmallVector<BufferOp>> chunks; // chunk -> its block's buffers
  std::map<std::vector<int64_t>, SmallVector<Workspace, 4>> workspaces;
};
} // namespace

/// The pipeline's slotted instances by pattern (docs/memory.md "Microbatch
/// slots"). Every slot of a chunk runs the same subroutines, so its
/// instances live alike:
///  - a buffer none of whose segments crosses an action's end (a chunk's
///    workspace) needs no instance per slot: every slot shares one, live in
///    the segments of all;
///  - the others (what a microbatch keeps from F to B and W: saved
///    activations, received values) are laid out once per chunk, at
///    offsets in a slot block computed from slot 0's lifetimes, and each
///    slot of the chunk is one block, live while any of its buffers is. The
///    layout is checked on every slot (no two buffers live at once share
///    bytes); a slot on which it would not hold, or a buffer that belongs to
///    no single chunk, leaves the whole program to per-instance placement.
/// So a buffer's instances sit at the block bases of its chunk plus one
/// offset, which the plan writes once per chunk ("slot deltas").
/// With `byPattern` false, or where the pattern does not hold, every
/// instance is an item of its own.
SlotLayout llcdist::plan::memory::layoutSlots(ArrayRef<Transient> instances,
                                              const llvm::DenseMap<StringAttr, int64_t> &slotsOf,
                                              ArrayRef<ActionSpan> spans, int64_t kernels, bool byPattern, bool adopt) {
  SlotLayoutBuilder builder(instances, slotsOf, spans, kernels, adopt);
  return byPattern ? builder.build() : builder.perInstance();
}

namespace {
/// layoutSlotsAlike's work, as layoutSlots' on slot 0 alone: classify the
/// slotted buffers (a chunk's block, or a workspace), then lay out each
/// block; each step returns false where the pattern does not hold.
class SlotPatternLayout {
public:
  SlotPatternLayout(ArrayRef<Transient> instances, const llvm::DenseMap<StringAttr, int64_t> &slotsOf,
                    const SlotPattern &pattern, int64_t kernels, bool adopt)
      : instances(instances), slotsOf(slotsOf), pattern(pattern), spans(pattern.spans), kernels(kernels), adopt(adopt) {
  }

  std::optional<SlotLayout> build() {
    if (!classify() || !adoptWorkspace() || !layOutChunks() || !layOutWorkspaces())
      return std::nullopt;
    return std::move(out);
  }

private:
  int64_t actionOf(int64_t time) const { return time >= 0 && time < kernels ? pattern.actionAt[size_t(time)] : -1; }

  bool classify() {
    // Unslotted instances in order of first use; slotted buffers in the order
    // of their first instance of any slot (ties: the buffer's place).
    for (const Transient &tr : instances) {
      if (!slotsOf.count(tr.buf.getSymNameAttr())) {
        out.items.push_back({tr.buf, 0, tr.segs, tr.bytes});
        continue;
      }
      if (tr.patternChunk < 0 || tr.slot != 0)
        return false;
      int64_t first = std::numeric_limits<int64_t>::max();
      for (int64_t k = 0; k < pattern.slots(tr.patternChunk); ++k)
        first = std::min(first, pattern.map(tr.patternChunk, k, tr.segs.front().first));
      slotted.push_back({&tr, tr.patternChunk, first});
    }
    llvm::stable_sort(slotted, [](const Slotted &x, const Slotted &y) {
      return std::make_pair(x.first, x.tr->index) < std::make_pair(y.first, y.tr->index);
    });
    for (const Slotted &s : slotted) {
      const Transient &tr = *s.tr;
      firstOf[&tr] = s.first;
      SegmentReach reach;
      auto action = [this](int64_t time) { return actionOf(time); };
      for (const Segment &seg : tr.segs)
        if (!reach.add(seg, action, spans))
          return false;
      const int64_t chunk = reach.chunk;
      if (chunk != s.chunk)
        return false;
      if (!reach.local) {
        chunks[chunk].push_back(&tr);
        continue;
      }
      // Slots' actions are distinct and run one after another, so slots'
      // segments of an action-local buffer never overlap.
      Workspace w{&tr, {}};
      for (const Segment &seg : tr.segs) {
        int64_t p = pattern.place[size_t(actionOf(seg.first))];
        if (w.places.empty() || w.places.back() != p)
          w.places.push_back(p);
      }
      std::vector<int64_t> key;
      const auto &bySlot = pattern.actions[size_t(chunk)];
      for (const std::vector<int64_t> &acts : bySlot)
        for (int64_t p : w.places)
          key.push_back(acts[size_t(p)]);
      llvm::sort(key);
      workspaces[key].push_back(std::move(w));
    }
    return true;
  }

  /// layoutSlots' adoptWorkspace, on slot 0.
  bool adoptWorkspace() {
    if (!adopt)
      return true;
    for (auto &[chunk, bufs] : chunks) {
      const int64_t slots = slotsOf.lookup(bufs.front()->buf.getSymNameAttr());
      std::vector<ArrayRef<Segment>> segs, candSegs;
      std::vector<int64_t> bytes, candBytes, candIndex;
      for (const Transient *tr : bufs) {
        segs.push_back(tr->segs);
        bytes.push_back(tr->bytes);
      }
      std::vector<Workspace *> cands;
      for (auto &[actions, members] : workspaces)
        for (Workspace &m : members)
          if (m.tr && m.tr->patternChunk == chunk && slotsOf.lookup(m.tr->buf.getSymNameAttr()) == slots) {
            cands.push_back(&m);
            candSegs.push_back(m.tr->segs);
            candBytes.push_back(m.tr->bytes);
            candIndex.push_back(m.tr->index);
          }
      for (size_t i : adoptedWorkspace(segs, bytes, candSegs, candBytes, candIndex, slotsInFlight(spans, chunk))) {
        bufs.push_back(cands[i]->tr);
        cands[i]->tr = nullptr; // taken
        ++out.adopted;
      }
      llvm::stable_sort(bufs, [&](const Transient *x, const Transient *y) {
        return std::make_pair(firstOf.lookup(x), x->index) < std::make_pair(firstOf.lookup(y), y->index);
      });
    }
    dropTaken(workspaces, [](const Workspace &m) { return !m.tr; });
    return true;
  }

  bool layOutChunks() {
    for (auto &[chunk, bufs] : chunks) {
      const int64_t slots = slotsOf.lookup(bufs.front()->buf.getSymNameAttr());
      if (slots != pattern.slots(chunk))
        return false;
      std::vector<ArrayRef<Segment>> segs0;
      std::vector<int64_t> sizes;
      for (const Transient *tr : bufs) {
        if (slotsOf.lookup(tr->buf.getSymNameAttr()) != slots)
          return false;
        segs0.push_back(tr->segs);
        sizes.push_back(tr->bytes);
      }
      const auto [at, blockBytes] = layOutBlock(segs0, sizes, kernels);
      // Slot 0's block segments, merged where they overlap or touch within an
      // action: the map keeps both. Touching across actions depends on where
      // a slot's actions run, so it is merged per slot, after the map.
      SmallVector<Segment, 2> all;
      for (ArrayRef<Segment> l : segs0)
        all.append(l.begin(), l.end());
      llvm::sort(all, [](const Segment &x, const Segment &y) { return x.first < y.first; });
      SmallVector<Segment, 2> runs;
      for (const Segment &s : all)
        if (!runs.empty() && (s.first <= runs.back().last ||
                              (s.first == runs.back().last + 1 && actionOf(s.first) == actionOf(runs.back().last))))
          runs.back().last = std::max(runs.back().last, s.last);
        else
          runs.push_back(s);
      for (int64_t k = 0; k < slots; ++k) {
        SmallVector<Segment, 2> &blockSegs = out.storage.emplace_back();
        for (const Segment &r : runs) {
          Segment m{pattern.map(chunk, k, r.first), pattern.map(chunk, k, r.last)};
          if (!blockSegs.empty() && m.first <= blockSegs.back().last + 1)
            blockSegs.back().last = std::max(blockSegs.back().last, m.last);
          else
            blockSegs.push_back(m);
        }
        out.items.push_back(blockItem(chunk, k, blockSegs, blockBytes));
      }
      for (auto [j, tr] : llvm::enumerate(bufs))
        out.inBlock[tr->buf.getSymNameAttr()] = {chunk, at[j]};
    }
    return true;
  }

  bool layOutWorkspaces() {
    int64_t nextWorkspace = kWorkspaceBlocks;
    for (auto &[actions, members] : workspaces) {
      const int64_t id = nextWorkspace++;
      const int64_t chunk = members.front().tr->patternChunk;
      const std::vector<int64_t> &slot0 = pattern.actions[size_t(chunk)][0];
      // Each member's slot-0 segments by the place of their action.
      std::map<int64_t, std::vector<ArrayRef<Segment>>> atPlace;
      for (const Workspace &m : members) {
        ArrayRef<Segment> segs = m.tr->segs;
        for (size_t i = 0; i < segs.size();) {
          int64_t a = actionOf(segs[i].first);
          size_t e = i;
          while (e < segs.size() && actionOf(segs[e].first) == a)
            ++e;
          atPlace[pattern.place[size_t(a)]].push_back(segs.slice(i, e - i));
          i = e;
        }
      }
      for (auto &[p, l] : atPlace)
        if (l.size() != members.size())
          return false; // (a key holds the same places for every member)
      std::vector<int64_t> sizes;
      for (const Workspace &m : members)
        sizes.push_back(m.tr->bytes);
      // The layout from the group's first action, as layoutSlots: its
      // members' segments there, moved from slot 0's action at that place.
      const int64_t p0 = pattern.place[size_t(actions.front())];
      const int64_t shift0 = spans[actions.front()].first - spans[slot0[p0]].first;
      std::vector<SmallVector<Segment, 2>> firstSegs;
      for (ArrayRef<Segment> l : atPlace.at(p0)) {
        SmallVector<Segment, 2> &f = firstSegs.emplace_back();
        for (const Segment &s : l)
          f.push_back({s.first + shift0, s.last + shift0});
      }
      std::vector<ArrayRef<Segment>> first(firstSegs.begin(), firstSegs.end());
      const auto [at, blockBytes] = layOutBlock(first, sizes, kernels);
      // Per place: whether its actions overlap alike (relative to their
      // starts) or at least keep the layout, and slot 0's hull there.
      std::map<int64_t, Segment> hull0;
      for (auto &[p, l] : atPlace) {
        bool alike = true;
        const std::vector<ArrayRef<Segment>> &f = atPlace.at(p0);
        for (size_t j = 0; j < members.size() && alike; ++j) {
          alike &= l[j].size() == f[j].size();
          for (size_t i = 0; i < l[j].size() && alike; ++i)
            alike &= l[j][i].first - spans[slot0[p]].first == f[j][i].first - spans[slot0[p0]].first &&
                     l[j][i].last - spans[slot0[p]].first == f[j][i].last - spans[slot0[p0]].first;
        }
        if (!alike && !disjointWhereLive(l, at, sizes))
          return false;
        hull0[p] = hullOf(l);
      }
      SmallVector<Segment, 2> &hulls = out.storage.emplace_back();
      for (int64_t a : actions) {
        int64_t p = pattern.place[size_t(a)];
        int64_t shift = spans[a].first - spans[slot0[p]].first;
        const Segment &h = hull0.at(p);
        hulls.push_back({h.first + shift, h.last + shift});
      }
      out.items.push_back(blockItem(id, -1, hulls, blockBytes));
      for (auto [j, m] : llvm::enumerate(members))
        out.inBlock[m.tr->buf.getSymNameAttr()] = {id, at[j], /*shared=*/true};
    }
    return true;
  }

  struct Slotted {
    const Transient *tr;
    int64_t chunk, first;
  };
  // Chunk blocks' buffers, and workspace buffers by the actions of every
  // slot they live in (the key layoutSlots groups them by).
  std::map<int64_t, SmallVector<const Transient *>> chunks;
  struct Workspace {
    const Transient *tr;
    std::vector<int64_t> places; // of slot 0's actions it lives in, in order
  };
  std::map<std::vector<int64_t>, SmallVector<Workspace, 4>> workspaces;
  ArrayRef<Transient> instances;
  const llvm::DenseMap<StringAttr, int64_t> &slotsOf;
  const SlotPattern &pattern;
  ArrayRef<ActionSpan> spans;
  int64_t kernels;
  bool adopt;
  llvm::DenseMap<const Transient *, int64_t> firstOf; // over every slot
  SlotLayout out;
  std::vector<Slotted> slotted;
};
} // namespace

// layoutSlots' steps on slot 0 alone (see SlotPattern): what every slot
// would repeat is worked out once, and what differs (where each slot's
// actions run) is the pattern's map.
std::optional<SlotLayout> llcdist::plan::memory::layoutSlotsAlike(ArrayRef<Transient> instances,
                                                                  const llvm::DenseMap<StringAttr, int64_t> &slotsOf,
                                                                  const SlotPattern &pattern, int64_t kernels,
                                                                  bool adopt) {
  return SlotPatternLayout(instances, slotsOf, pattern, kernels, adopt).build();
}
