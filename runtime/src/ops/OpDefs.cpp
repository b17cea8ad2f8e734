// The op definition table (OpDefs.h): the families' registrations, the completeness check, and the
// helpers their checkers and binders share.
#include "OpDefs.h"

namespace llcdist::rt::ops {

using planjson::index;
using planjson::key;
namespace sc = schema;

const OpDefTable& opDefs() {
  static const OpDefTable table = [] {
    OpDefTable t("the op definitions (src/ops)");
    registerDataOps(t);
    registerLayoutOps(t);
    registerElementwiseOps(t);
    registerEmbeddingOps(t);
    registerNormOps(t);
    registerLinearOps(t);
    registerRopeOps(t);
    registerAttentionOps(t);
    registerLossOps(t);
    registerOptimizerOps(t);
    registerCommunicationOps(t);
    registerMoeOps(t);
    return t;
  }();
  return table;
}

Status checkOpDefs() {
  static const Status result = [] {
    const OpDefTable& t = opDefs();
    LLCDIST_RETURN_IF_ERROR(t.check());
    for (size_t i = 0; i < sc::kNumOpKinds; ++i) {
      const OpDef& d = *t.find(sc::OpKind(i));
      if (d.family.empty() || !d.check || !d.bind)
        return Status::internal(t.name() + ": op " + std::string(sc::opName(sc::OpKind(i))) +
                                " lacks a family, a checker or a binder");
    }
    return Status::ok();
  }();
  return result;
}

// ---- OpChecker ---------------------------------------------------------------------------------------
Status OpChecker::error(const std::string& rel, const std::string& msg) const {
  return doc_.error(key(path_, rel), msg);
}
Status OpChecker::attrError(const char* attr, const std::string& msg) const {
  return doc_.error(key(key(path_, "attrs"), attr), msg);
}
Status OpChecker::argError(const char* role, const std::string& msg) const {
  return doc_.error(key(key(path_, "args"), role), msg);
}
Status OpChecker::argError(const char* role, size_t k, const std::string& msg) const {
  return doc_.error(argPath(role, k, true), msg);
}
std::string OpChecker::argPath(const char* role, size_t k, bool list) const {
  const std::string p = key(key(path_, "args"), role);
  return list ? index(p, k) : p;
}

Status OpChecker::count(const char* role, int64_t expected, const std::string& formula) const {
  const std::vector<int64_t>& ids = op_.argList(role);
  for (size_t k = 0; k < ids.size(); ++k) {
    const BufferDesc& b = prog_.buffers[size_t(ids[k])];
    if (b.numel() != expected) {
      const bool list = sc::isListArity(sc::opSpec(op_.kind).args[size_t(sc::argIndex(op_.kind, role))].arity);
      return doc_.error(argPath(role, k, list), "buffer " + std::to_string(ids[k]) + " (\"" + b.name + "\") has " +
                                                    std::to_string(b.numel()) + " elements, expected " + formula +
                                                    " = " +
                                                    (expected < 0 ? std::string("(overflow)") : std::to_string(expected)) +
                                                    " from the op's attrs");
    }
  }
  return Status::ok();
}

Status OpChecker::everyRole(int64_t n, const std::string& formula) const {
  const sc::OpSpec& spec = sc::opSpec(op_.kind);
  for (size_t i = 0; i < spec.numArgs; ++i)
    LLCDIST_RETURN_IF_ERROR(count(std::string(spec.args[i].role).c_str(), n, formula));
  return Status::ok();
}

int64_t OpChecker::prod(std::initializer_list<int64_t> xs) {
  int64_t r = 1;
  for (int64_t x : xs)
    if (__builtin_mul_overflow(r, x, &r)) return -1;
  return r;
}

Status OpChecker::sameCount(std::initializer_list<const char*> roles) const {
  const char* first = *roles.begin();
  const int64_t n = prog_.buffers[size_t(op_.arg(first))].numel();
  for (const char* r : roles) LLCDIST_RETURN_IF_ERROR(count(r, n, std::string("numel(") + first + ")"));
  return Status::ok();
}

Status OpChecker::wholeSide(const char* role, int64_t n, int64_t outer, int64_t inner) const {
  const std::string nName = "n(" + op_.stringAttr("axis") + ")";
  if (!op_.attrs.count("total")) return count(role, prod({outer, n, inner}), "outer×" + nName + "×inner");
  const int64_t total = I("total"), padded = prod({n, inner});
  if (padded < 0 || total > padded)
    return attrError("total", "total " + std::to_string(total) + " exceeds " + nName + "×inner = " +
                                  std::to_string(n) + "×" + std::to_string(inner) +
                                  " (the padded blocks hold at most that many elements)");
  return count(role, prod({outer, total}), "outer×total");
}

Status OpChecker::singleAxis(const char* attr, MeshAxis* axis) const {
  const std::string name = op_.stringAttr(attr);
  const auto a = parseMeshAxis(name);
  if (a) {
    if (axis) *axis = *a;
    return Status::ok();
  }
  const std::string axes = R"("dp", "tp", "pp", "cp", "ep" or "edp")";
  if (name.find('+') != std::string::npos)  // "dp+cp": only the collectives' and shard_slice's axis
    return attrError(attr, std::string(attr) + " \"" + name + "\" names a set of mesh axes, but " +
                               std::string(sc::opName(op_.kind)) + "'s " + attr + " needs a single axis (" + axes +
                               ")");
  return attrError(attr, "unknown mesh axis \"" + name + "\" (expected " + axes + ")");
}

Status OpChecker::axisSize(int64_t* n) const {
  MeshAxis a{};
  LLCDIST_RETURN_IF_ERROR(singleAxis("axis", &a));
  if (n) *n = manifest_.mesh().axisSize(a);
  return Status::ok();
}

Status OpChecker::axisSetSize(int64_t* n) const {
  const std::string name = op_.stringAttr("axis");
  const auto s = parseAxisSet(name);
  if (!s) return attrError("axis", axisSetError(name));
  if (n) *n = manifest_.mesh().axisSize(*s);
  return Status::ok();
}

Status OpChecker::shardAxis() const {
  const std::string attr(sc::kShardAxisAttr);
  return op_.attrs.count(attr) ? singleAxis(attr.c_str()) : Status::ok();
}

Status OpChecker::axisRows(const std::string& axisName, int64_t S) const {
  if (parseMeshAxis(axisName) != MeshAxis::kCp || manifest_.cpLayout != sc::CpLayout::kLoadBalanced || S % 2 == 0)
    return Status::ok();
  return attrError("S", "mesh.cp_layout \"load_balanced\" gives each cp rank two runs of S/2 rows, but S = " +
                            std::to_string(S) + " is odd");
}

PositionRuns axisRowPositions(const Manifest& manifest, MeshAxis axis, int64_t coord, int64_t S) {
  if (axis != MeshAxis::kCp) return {coord * S, S, 0};
  const int64_t n = manifest.mesh().axisSize(axis);
  return contextParallelPositions(S * n, n, coord, manifest.cpLayout);
}

namespace {
const AxisSet kTpCp{AxisSet::of(MeshAxis::kTp).bits | AxisSet::of(MeshAxis::kCp).bits};

// Rows [off, ...) of `r`, numbered from 0.
PositionRuns rowsFrom(const PositionRuns& r, int64_t off) {
  if (off >= r.split) return PositionRuns::from(r.second + (off - r.split));
  return {r.first + off, r.split - off, r.second};
}
}  // namespace

bool isSequenceAxes(AxisSet axes) { return axes.single().has_value() || axes == kTpCp; }

PositionRuns sequenceRowPositions(const Manifest& manifest, const Mesh& mesh, AxisSet axes, int64_t rank, int64_t S) {
  if (auto a = axes.single()) return axisRowPositions(manifest, *a, mesh.coord(rank, *a), S);
  const int64_t tp = mesh.axisSize(MeshAxis::kTp);
  const PositionRuns slice = axisRowPositions(manifest, MeshAxis::kCp, mesh.coord(rank, MeshAxis::kCp), S * tp);
  return rowsFrom(slice, mesh.coord(rank, MeshAxis::kTp) * S);
}

// ---- BindContext -------------------------------------------------------------------------------------
StatusOr<MeshAxis> BindContext::axis(const std::string& attr, const char* what) const {
  const std::string name = op.stringAttr(attr);
  auto a = parseMeshAxis(name);
  if (!a) return Status::internal(std::string("unknown ") + what + " \"" + name + "\"");
  return *a;
}

StatusOr<AxisSet> BindContext::axisSet(const std::string& attr, const char* what) const {
  const std::string name = op.stringAttr(attr);
  auto s = parseAxisSet(name);
  if (!s) return Status::internal(std::string("unknown ") + what + " \"" + name + "\"");
  return *s;
}

}  // namespace llcdist::rt::ops
