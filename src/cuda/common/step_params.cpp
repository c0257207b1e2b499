// make_step_params (step_params.h).
#include "cuda/common/step_params.h"

namespace ringpack::cuda {

StepParams make_step_params(const AttentionStep& step) {
  const AttentionDims& d = step.dims;
  StepParams p{};
  p.q = step.q;
  p.k = step.k;
  p.v = step.v;
  p.segment_ids_q = step.segment_ids_q;
  p.positions_q = step.positions_q;
  p.segment_ids_k = step.segment_ids_k;
  p.positions_k = step.positions_k;
  p.batch = d.batch;
  p.seqlen_q = d.seqlen_q;
  p.seqlen_k = d.seqlen_k;
  p.num_heads_q = d.num_heads_q;
  p.num_heads_kv = d.num_heads_kv;
  p.heads_per_kv = d.num_heads_q / d.num_heads_kv;
  p.q_token_stride = int64_t(d.num_heads_q) * d.head_dim;
  p.kv_token_stride = int64_t(d.num_heads_kv) * d.head_dim;
  p.scale = resolve_scale(step.scale, d.head_dim);
  p.scale_log2 = p.scale * kLog2e;
  p.mask = step.mask;
  return p;
}

}  // namespace ringpack::cuda
