// Family "data": load_microbatch, which the interpreter runs itself (the data source's batch copied
// into the ids / targets buffers); no backend kernel.
#include "OpDefs.h"

namespace llcdist::rt::ops {
namespace {

Status checkLoadMicrobatch(const OpChecker& c) {
  const int64_t B = c.I("B"), S = c.I("S");
  if (B != c.manifest().microBatch)
    return c.attrError("B", "expected batch.micro_batch = " + std::to_string(c.manifest().microBatch));
  // Context parallelism: each rank loads its seq_len / cp positions of every sample.
  const Manifest& m = c.manifest();
  if (m.meshCp > 1 && S != m.seqLen / m.meshCp)
    return c.attrError("S", "expected batch.seq_len / mesh.cp = " + std::to_string(m.seqLen) + " / " +
                                std::to_string(m.meshCp) + " = " + std::to_string(m.seqLen / m.meshCp) +
                                " (each cp rank loads its chunk of every sample)");
  if (m.meshCp == 1 && S != m.seqLen) return c.attrError("S", "expected batch.seq_len = " + std::to_string(m.seqLen));
  LLCDIST_RETURN_IF_ERROR(c.count("ids", OpChecker::prod({B, S}), "B×S"));
  return c.count("targets", OpChecker::prod({B, S}), "B×S");
}

StatusOr<OpParams> bindLoadMicrobatch(const BindContext& b) {
  return OpParams(DataParams{b.op.intAttr("B"), b.op.intAttr("S")});
}

}  // namespace

void registerDataOps(OpDefTable& t) {
  t.add(schema::OpKind::kLoadMicrobatch, {"data", checkLoadMicrobatch, bindLoadMicrobatch});
}

}  // namespace llcdist::rt::ops
