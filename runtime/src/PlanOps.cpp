// One op of a program: roles and attrs against PlanSchema, dtypes, argument aliasing, and the element
// counts implied by the attrs (the op family's checker, src/ops/). See Plan.h for the contract.
#include "PlanOps.h"

#include "ops/OpDefs.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

namespace llcdist::rt {

// ---- Op accessors ----------------------------------------------------------------------------------
int64_t Op::intAttr(const std::string& name, int64_t dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<int64_t>(&it->second)) return *v;
  return dflt;
}
double Op::floatAttr(const std::string& name, double dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<double>(&it->second)) return *v;
  if (auto* v = std::get_if<int64_t>(&it->second)) return double(*v);
  return dflt;
}
bool Op::boolAttr(const std::string& name, bool dflt) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return dflt;
  if (auto* v = std::get_if<bool>(&it->second)) return *v;
  return dflt;
}
std::string Op::stringAttr(const std::string& name) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::string>(&it->second)) return *v;
  return {};
}
std::vector<int64_t> Op::intListAttr(const std::string& name) const {
  auto it = attrs.find(name);
  if (it == attrs.end()) return {};
  if (auto* v = std::get_if<std::vector<int64_t>>(&it->second)) return *v;
  return {};
}
int64_t Op::peerCoordinate(int64_t coord, int64_t size) const {
  if (!attrs.count("shift")) return intAttr("peer", -1);
  return (coord + intAttr("shift")) % size;
}

int64_t Op::arg(std::string_view role) const {
  const int i = schema::argIndex(kind, role);
  if (i < 0 || size_t(i) >= args.size() || args[size_t(i)].empty()) return -1;
  return args[size_t(i)][0];
}
const std::vector<int64_t>& Op::argList(std::string_view role) const {
  static const std::vector<int64_t> kEmpty;
  const int i = schema::argIndex(kind, role);
  if (i < 0 || size_t(i) >= args.size()) return kEmpty;
  return args[size_t(i)];
}

schema::ArgAccess Op::access(size_t role) const {
  return schema::effectiveAccess(kind, role, !attrs.count("accumulate") || boolAttr("accumulate"));
}

namespace planops {
namespace {

using planjson::Doc;
using planjson::index;
using planjson::json;
using planjson::key;
namespace sc = schema;

std::string roleList(const sc::OpSpec& spec) {
  std::string s;
  for (size_t i = 0; i < spec.numArgs; ++i) {
    const sc::ArgSpec& a = spec.args[i];
    s += (i ? ", " : "") + std::string(a.role) +
         (a.arity == sc::ArgArity::kList           ? " (list)"
          : a.arity == sc::ArgArity::kOptionalList ? " (optional list)"
          : a.arity == sc::ArgArity::kOptional     ? " (optional)"
                                                   : "");
  }
  return s;
}

std::string attrList(const sc::OpSpec& spec) {
  std::string s;
  for (size_t i = 0; i < spec.numAttrs; ++i)
    s += (i ? ", " : "") + std::string(spec.attrs[i].name) + (spec.attrs[i].required ? "" : " (optional)");
  return s.empty() ? "none" : s;
}

Status parseId(const Doc& doc, const json& v, const std::string& path, const Program& prog,
               const sc::ArgSpec& spec, int64_t* id) {
  if (!v.is_number_integer()) return doc.error(path, "expected a buffer id (integer), got " + planjson::describe(v));
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
    return doc.error(path, "buffer id " + v.dump() + " is out of range");
  *id = v.get<int64_t>();
  if (*id < 0 || *id >= int64_t(prog.buffers.size()))
    return doc.error(path, "buffer id " + std::to_string(*id) + " is out of range (the program has " +
                               std::to_string(prog.buffers.size()) + " buffers, ids 0.." +
                               std::to_string(int64_t(prog.buffers.size()) - 1) + ")");
  const BufferDesc& b = prog.buffers[size_t(*id)];
  // Float roles take f32 or bf16 (bf16 storage, fp32 arithmetic); ids and targets i32; f64 only the
  // partial reductions (f64 roles and all_reduce's x, which takes i32 too); `fill_zero` anything.
  const bool isF64 = b.dtype == sc::ElemType::kF64;
  bool ok = false;
  const char* needs = "";
  switch (spec.type) {
    case sc::ArgType::kAny: ok = true; break;
    case sc::ArgType::kF32: ok = sc::isFloatType(b.dtype), needs = "f32 or bf16"; break;
    case sc::ArgType::kI32: ok = b.dtype == sc::ElemType::kI32, needs = "i32"; break;
    case sc::ArgType::kF64: ok = isF64, needs = "f64"; break;
    case sc::ArgType::kReducible:
      ok = sc::isFloatType(b.dtype) || isF64 || b.dtype == sc::ElemType::kI32, needs = "f32, bf16, f64 or i32";
      break;
  }
  if (!ok)
    return doc.error(path, "buffer " + std::to_string(*id) + " (\"" + b.name + "\") is " +
                               std::string(sc::elemTypeName(b.dtype)) + " but role \"" + std::string(spec.role) +
                               "\" needs " + needs);
  return Status::ok();
}

Status parseArgs(const Doc& doc, const json& args, const std::string& path, const Program& prog,
                 const sc::OpSpec& spec, Op* out) {
  LLCDIST_RETURN_IF_ERROR(doc.object(args, path));
  for (auto it = args.begin(); it != args.end(); ++it)
    if (sc::argIndex(spec.kind, it.key()) < 0)
      return doc.error(key(path, it.key()), "unknown role for op \"" + std::string(spec.name) +
                                                "\" (expected: " + roleList(spec) + ")");
  out->args.assign(spec.numArgs, {});
  for (size_t i = 0; i < spec.numArgs; ++i) {
    const sc::ArgSpec& a = spec.args[i];
    const std::string role(a.role);
    const std::string p = key(path, role);
    if (!args.contains(role)) {
      if (sc::isOptionalArity(a.arity)) continue;
      return doc.error(p, "missing role \"" + role + "\" of op \"" + std::string(spec.name) + "\" (expected: " +
                              roleList(spec) + ")");
    }
    const json& v = args.at(role);
    if (sc::isListArity(a.arity) && a.singleIdOk && !v.is_array()) {  // one id: a list of one
      int64_t id = 0;
      LLCDIST_RETURN_IF_ERROR(parseId(doc, v, p, prog, a, &id));
      out->args[i].push_back(id);
    } else if (sc::isListArity(a.arity)) {
      if (!v.is_array() || v.empty()) return doc.error(p, "expected a non-empty array of buffer ids, got " + planjson::describe(v));
      for (size_t k = 0; k < v.size(); ++k) {
        int64_t id = 0;
        LLCDIST_RETURN_IF_ERROR(parseId(doc, v[k], index(p, k), prog, a, &id));
        out->args[i].push_back(id);
      }
    } else {
      int64_t id = 0;
      LLCDIST_RETURN_IF_ERROR(parseId(doc, v, p, prog, a, &id));
      out->args[i].push_back(id);
    }
  }
  return Status::ok();
}

Status parseAttrs(const Doc& doc, const json& attrs, const std::string& path, const sc::OpSpec& spec, Op* out) {
  LLCDIST_RETURN_IF_ERROR(doc.object(attrs, path));
  for (auto it = attrs.begin(); it != attrs.end(); ++it) {
    const bool known = std::any_of(spec.attrs, spec.attrs + spec.numAttrs,
                                   [&](const sc::AttrSpec& a) { return a.name == it.key(); });
    if (!known)
      return doc.error(key(path, it.key()), "unknown attribute for op \"" + std::string(spec.name) +
                                                "\" (expected: " + attrList(spec) + ")");
  }
  for (size_t i = 0; i < spec.numAttrs; ++i) {
    const sc::AttrSpec& a = spec.attrs[i];
    const std::string name(a.name);
    const std::string p = key(path, name);
    if (!attrs.contains(name)) {
      if (a.required) return doc.error(p, "missing attribute \"" + name + "\" of op \"" + std::string(spec.name) + "\"");
      continue;
    }
    switch (a.type) {
      case sc::AttrType::kInt:
      case sc::AttrType::kIndex: {  // >= 1, or >= 0 for an index (peer, tag)
        int64_t v = 0;
        LLCDIST_RETURN_IF_ERROR(doc.integer(attrs, path, name.c_str(), &v, a.type == sc::AttrType::kInt ? 1 : 0));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kFloat: {
        double v = 0;
        LLCDIST_RETURN_IF_ERROR(doc.number(attrs, path, name.c_str(), &v));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kBool: {
        bool v = false;
        LLCDIST_RETURN_IF_ERROR(doc.boolean(attrs, path, name.c_str(), &v));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kString: {
        std::string v;
        LLCDIST_RETURN_IF_ERROR(doc.string(attrs, path, name.c_str(), &v));
        out->attrs[name] = v;
        break;
      }
      case sc::AttrType::kIntList: {
        std::vector<int64_t> v;
        LLCDIST_RETURN_IF_ERROR(doc.intArray(attrs, path, name.c_str(), &v, 1));
        if (v.empty()) return doc.error(p, "expected a non-empty array");
        out->attrs[name] = v;
        break;
      }
    }
  }
  return Status::ok();
}

bool aliasAllowed(const sc::ArgSpec& written, std::string_view other) {
  std::string_view list = written.mayAlias;
  while (!list.empty()) {
    const size_t bar = list.find('|');
    if (list.substr(0, bar) == other) return true;
    if (bar == std::string_view::npos) break;
    list.remove_prefix(bar + 1);
  }
  return false;
}

// Two arguments may overlap only if neither is written, or they are the exact same range and the
// schema allows that alias.
bool breaksAliasRule(const sc::OpSpec& spec, const AliasScratch::Use& x, const AliasScratch::Use& y) {
  const sc::ArgSpec& ax = spec.args[x.role];
  const sc::ArgSpec& ay = spec.args[y.role];
  if (ax.access == sc::ArgAccess::kRead && ay.access == sc::ArgAccess::kRead) return false;
  const bool exact = x.offset == y.offset && x.bytes == y.bytes;
  return !(exact && ((ax.access != sc::ArgAccess::kRead && aliasAllowed(ax, ay.role)) ||
                     (ay.access != sc::ArgAccess::kRead && aliasAllowed(ay, ax.role))));
}

// Most ops have a handful of arguments: up to this many, the alias check is the pairwise scan itself.
constexpr size_t kPairwiseUses = 16;

// The op's arguments in argument order, each with its instance's bytes at `slot`.
void collectUses(const Program& prog, const Op& op, int64_t slot, std::vector<AliasScratch::Use>* uses) {
  uses->clear();
  for (size_t i = 0; i < op.args.size(); ++i)
    for (size_t k = 0; k < op.args[i].size(); ++k) {
      const BufferDesc& b = prog.buffers[size_t(op.args[i][k])];
      uses->push_back({i, k, op.args[i][k], b.offsetAt(slot), b.bytes});
    }
}

// The op's arguments against that rule, `slot` naming the instance of each slotted buffer
// (docs/plan-format.md "Microbatch slots") the op runs on. Returns the first offending pair (x, y) of
// scratch->uses, x < y in argument order, as a pairwise scan would; builds no strings (aliasError does,
// for the pair).
std::optional<std::pair<size_t, size_t>> findBadAlias(const Program& prog, const Op& op, int64_t slot,
                                                      AliasScratch* scratch) {
  const sc::OpSpec& spec = sc::opSpec(op.kind);
  std::vector<AliasScratch::Use>& uses = scratch->uses;
  collectUses(prog, op, slot, &uses);
  auto overlap = [](const AliasScratch::Use& x, const AliasScratch::Use& y) {
    return x.bytes > 0 && y.bytes > 0 && x.offset < y.offset + y.bytes && y.offset < x.offset + x.bytes;
  };
  if (uses.size() <= kPairwiseUses) {
    for (size_t x = 0; x < uses.size(); ++x)
      for (size_t y = x + 1; y < uses.size(); ++y)
        if (overlap(uses[x], uses[y]) && breaksAliasRule(spec, uses[x], uses[y])) return std::make_pair(x, y);
    return std::nullopt;
  }
  // Only pairs whose bytes overlap can break the rule: sweep the uses in
  // offset order (an op's list args grow with the layers, e.g. grad_norm
  // over every gradient, so all pairs would be quadratic).
  std::vector<size_t>& byOffset = scratch->byOffset;
  byOffset.clear();
  for (size_t u = 0; u < uses.size(); ++u)
    if (uses[u].bytes > 0) byOffset.push_back(u);
  std::sort(byOffset.begin(), byOffset.end(), [&](size_t a, size_t b) { return uses[a].offset < uses[b].offset; });
  std::optional<std::pair<size_t, size_t>> bad;
  std::vector<size_t>& open = scratch->open;  // uses whose bytes reach past the current offset
  open.clear();
  for (size_t u : byOffset) {
    const AliasScratch::Use& bu = uses[u];
    open.erase(std::remove_if(open.begin(), open.end(),
                              [&](size_t o) { return uses[o].offset + uses[o].bytes <= bu.offset; }),
               open.end());
    for (size_t o : open) {
      const size_t x = std::min(o, u), y = std::max(o, u);
      if (breaksAliasRule(spec, uses[x], uses[y]) && (!bad || std::make_pair(x, y) < *bad)) bad = std::make_pair(x, y);
    }
    open.push_back(u);
  }
  return bad;
}

// The error for findBadAlias's pair `bad` of the op at `path`.
Status aliasError(const Doc& doc, const std::string& path, const Program& prog, const Op& op, int64_t slot,
                  const AliasScratch& scratch, std::pair<size_t, size_t> bad) {
  const sc::OpSpec& spec = sc::opSpec(op.kind);
  auto where = [&](const AliasScratch::Use& u) {
    const sc::ArgSpec& a = spec.args[u.role];
    return key(key(path, "args"), std::string(a.role)) +
           (sc::isListArity(a.arity) ? "[" + std::to_string(u.k) + "]" : "");
  };
  const AliasScratch::Use &ux = scratch.uses[bad.first], &uy = scratch.uses[bad.second];
  const BufferDesc& bx = prog.buffers[size_t(ux.id)];
  const BufferDesc& by = prog.buffers[size_t(uy.id)];
  return doc.error(where(uy), "buffer " + std::to_string(uy.id) + " (\"" + by.name + "\") overlaps " + where(ux) +
                                  " (buffer " + std::to_string(ux.id) + ", \"" + bx.name +
                                  "\") in the arena, and op \"" + std::string(spec.name) +
                                  "\" does not allow that alias" +
                                  (slot > 0 ? " (in slot " + std::to_string(slot) + ")" : ""));
}

// "queue" and "token" (feature "async"): the queue must be one of the program's, and only
// communication ops may leave "compute"; only communication ops are started with a token, and a wait
// needs one. The token rules across ops are the program's (checkTokens, Plan.cpp).
Status parseAsyncFields(const Doc& doc, const json& j, const std::string& path, const Program& prog,
                        const Manifest& manifest, Op* out) {
  const bool hasQueue = j.contains("queue"), hasToken = j.contains("token");
  // (A wait always has a token: the loader's key check requires it.)
  if ((hasQueue || hasToken) && !manifest.hasFeature(sc::kAsyncFeature))
    return doc.error(key(path, hasQueue ? "queue" : "token"), std::string(hasQueue ? "\"queue\"" : "\"token\"") +
                                                                  " needs the feature \"async\" in \"features\" "
                                                                  "(asynchronous plans)");
  const std::string opName(sc::opName(out->kind));
  if (hasQueue) {
    std::string q;
    LLCDIST_RETURN_IF_ERROR(doc.string(j, path, "queue", &q));
    auto it = std::find(prog.queues.begin(), prog.queues.end(), q);
    if (it == prog.queues.end()) {
      std::string known;
      for (const std::string& n : prog.queues) known += (known.empty() ? "\"" : ", \"") + n + "\"";
      return doc.error(key(path, "queue"), "unknown queue \"" + q + "\" (the program's queues: " + known + ")");
    }
    out->queue = int64_t(it - prog.queues.begin());
    if (out->queue != 0 && !sc::communicates(out->kind) && out->kind != sc::OpKind::kWait)
      return doc.error(key(path, "queue"), "op \"" + opName + "\" must run on queue \"" +
                                               std::string(sc::kComputeQueue) + "\" (only communication ops and "
                                               "wait may use queue \"" + q + "\")");
  }
  if (hasToken) {
    LLCDIST_RETURN_IF_ERROR(doc.integer(j, path, "token", &out->token, 0));
    if (!sc::communicates(out->kind) && out->kind != sc::OpKind::kWait)
      return doc.error(key(path, "token"),
                       "op \"" + opName +
                           "\" cannot be started asynchronously (only "
                           "all_reduce, all_gather, reduce_scatter, all_to_all, send and recv take a token)");
  }
  return Status::ok();
}

}  // namespace

Status parseOp(const Doc& doc, const json& j, const std::string& path, const Program& prog, const Manifest& manifest,
               Op* out) {
  if (j.is_object() && j.contains("op") && j.at("op") == "wait") {
    // wait (feature "async"): no roles or attrs to give ("args" / "attrs" may be spelled empty).
    LLCDIST_RETURN_IF_ERROR(doc.keys(j, path, {"op", "token"}, {"args", "attrs", "loc", "queue"}));
  } else {
    LLCDIST_RETURN_IF_ERROR(doc.keys(j, path, {"op", "args"}, {"attrs", "loc", "queue", "token"}));
  }
  std::string name;
  LLCDIST_RETURN_IF_ERROR(doc.string(j, path, "op", &name));
  auto kind = sc::parseOpKind(name);
  if (!kind) return doc.error(key(path, "op"), "unknown op \"" + name + "\" (the ops of version 1 are listed in docs/plan-format.md)");
  out->kind = *kind;
  const sc::OpSpec& spec = sc::opSpec(*kind);
  if (j.contains("loc")) LLCDIST_RETURN_IF_ERROR(doc.string(j, path, "loc", &out->loc));
  LLCDIST_RETURN_IF_ERROR(parseAsyncFields(doc, j, path, prog, manifest, out));
  static const json kEmpty = json::object();
  LLCDIST_RETURN_IF_ERROR(
      parseArgs(doc, j.contains("args") ? j.at("args") : kEmpty, key(path, "args"), prog, spec, out));
  LLCDIST_RETURN_IF_ERROR(parseAttrs(doc, j.contains("attrs") ? j.at("attrs") : kEmpty, key(path, "attrs"), spec, out));
  // Element counts and attribute consistency: the op's family's checker (src/ops/<Family>.cpp).
  const ops::OpDef* def = ops::opDefs().find(*kind);
  if (!def) return Status::internal("op \"" + name + "\" has no definition (docs/adding-an-op.md)");
  LLCDIST_RETURN_IF_ERROR(def->check(ops::OpChecker(doc, path, prog, manifest, *out)));
  AliasScratch scratch;
  if (auto bad = findBadAlias(prog, *out, 0, &scratch)) return aliasError(doc, path, prog, *out, 0, scratch, *bad);
  return Status::ok();
}

SlotChecker::SlotChecker(const Program& prog) : prog_(prog), subs_(prog.subroutines.size()) {}

SlotChecker::SubroutineSlots& SlotChecker::slotsOf(size_t subroutine) {
  SubroutineSlots& s = subs_[subroutine];
  if (s.computed) return s;
  s.computed = true;
  const std::vector<Op>& ops = prog_.subroutines[subroutine].ops;
  for (size_t j = 0; j < ops.size(); ++j) {
    SlottedOp so{j, INT64_MAX, false, s.pairs.size(), s.pairs.size()};
    for (const std::vector<int64_t>& role : ops[j].args)
      for (int64_t id : role)
        if (int64_t n = prog_.buffers[size_t(id)].instances(); n > 1) so.instances = std::min(so.instances, n);
    if (so.instances == INT64_MAX) continue;  // no slotted buffer
    s.instances = std::min(s.instances, so.instances);
    // The pairs that can break the alias rule in some slot, in the pairwise scan's order: not two
    // reads, no empty buffer, not two unslotted buffers (their bytes are slot 0's in every slot).
    const sc::OpSpec& spec = sc::opSpec(ops[j].kind);
    collectUses(prog_, ops[j], 0, &scratch_.uses);
    const std::vector<AliasScratch::Use>& uses = scratch_.uses;
    so.sweep = uses.size() > kPairwiseUses;
    for (size_t x = 0; !so.sweep && x < uses.size(); ++x)
      for (size_t y = x + 1; y < uses.size(); ++y) {
        const sc::ArgSpec& ax = spec.args[uses[x].role];
        const sc::ArgSpec& ay = spec.args[uses[y].role];
        const BufferDesc& bx = prog_.buffers[size_t(uses[x].id)];
        const BufferDesc& by = prog_.buffers[size_t(uses[y].id)];
        if ((ax.access == sc::ArgAccess::kRead && ay.access == sc::ArgAccess::kRead) || bx.bytes == 0 ||
            by.bytes == 0 || (bx.instances() == 1 && by.instances() == 1))
          continue;
        const bool exactAllowed = (ax.access != sc::ArgAccess::kRead && aliasAllowed(ax, ay.role)) ||
                                  (ay.access != sc::ArgAccess::kRead && aliasAllowed(ay, ax.role));
        s.pairs.push_back({&bx, &by, exactAllowed});
      }
    so.pairsEnd = s.pairs.size();
    s.ops.push_back(so);
  }
  return s;
}

Status SlotChecker::check(const Doc& doc, const std::string& path, size_t subroutine, int64_t slot) {
  if (slot == 0) return Status::ok();  // what parseOp checked
  SubroutineSlots& s = slotsOf(subroutine);
  if (s.ops.empty()) return Status::ok();  // runs the same in every slot
  // A slot below every slotted buffer's instance count cannot fail the instance check; it is checked
  // once. A slot at or past one of them fails, and is never recorded.
  const bool valid = slot < s.instances;
  if (valid) {
    if (s.checked.empty()) s.checked.assign(size_t(s.instances), false);
    if (s.checked[size_t(slot)]) return Status::ok();
  }
  const Subroutine& sub = prog_.subroutines[subroutine];
  // The ops in order, each its instances and then its aliasing: the first error of that scan.
  for (const SlottedOp& so : s.ops) {
    const Op& op = sub.ops[so.op];
    if (slot >= so.instances)
      for (const std::vector<int64_t>& role : op.args)
        for (int64_t id : role) {
          const BufferDesc& b = prog_.buffers[size_t(id)];
          if (b.instances() == 1 || slot < b.instances()) continue;
          return doc.error(key(path, "slot"), "slot " + std::to_string(slot) + " of subroutine \"" + sub.name +
                                                  "\", but its buffer " + std::to_string(id) + " (\"" + b.name +
                                                  "\") has " + std::to_string(b.instances()) + " slot_offsets");
        }
    bool bad = so.sweep;  // a long argument list: findBadAlias's sweep decides
    for (size_t p = so.pairsBegin; !bad && p < so.pairsEnd; ++p) {
      const BufferPair& bp = s.pairs[p];
      const int64_t x = bp.x->offsetAt(slot), y = bp.y->offsetAt(slot);
      bad = x < y + bp.y->bytes && y < x + bp.x->bytes &&
            !(bp.exactAllowed && x == y && bp.x->bytes == bp.y->bytes);
    }
    if (!bad) continue;
    if (auto pair = findBadAlias(prog_, op, slot, &scratch_)) {
      auto opPath = index(key(index("subroutines", subroutine), "ops"), so.op);
      return aliasError(doc, opPath, prog_, op, slot, scratch_, *pair);
    }
  }
  s.checked[size_t(slot)] = true;
  return Status::ok();
}

}  // namespace planops
}  // namespace llcdist::rt
