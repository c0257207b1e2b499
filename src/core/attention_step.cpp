// The contract of one AttentionStep shared by every backend (include/ringpack/attention.h): the
// default softmax scale, the checks of a step's sizes and pointers, and the default
// forward_direct.
#include <cmath>
#include <limits>
#include <string>

#include "ringpack/attention.h"
#include "ringpack/error.h"

namespace ringpack {

float resolve_scale(float scale, int head_dim) {
  return scale > 0.0f ? scale : float(1.0 / std::sqrt(double(head_dim)));
}

void check_attention_step(const AttentionStep& step, const std::string& backend) {
  const AttentionDims& d = step.dims;
  RINGPACK_CHECK(d.batch >= 0 && d.seqlen_q >= 0 && d.seqlen_k >= 0, backend,
                 " backend: negative size (batch ", d.batch, ", seqlen_q ", d.seqlen_q,
                 ", seqlen_k ", d.seqlen_k, ")");
  RINGPACK_CHECK(d.head_dim >= 1, backend, " backend: head_dim ", d.head_dim, " must be >= 1");
  RINGPACK_CHECK(d.num_heads_q >= 1 && d.num_heads_kv >= 1 && d.num_heads_q % d.num_heads_kv == 0,
                 backend, " backend: num_heads_q ", d.num_heads_q,
                 " must be a positive multiple of num_heads_kv ", d.num_heads_kv);
  const bool empty = d.batch == 0 || d.seqlen_q == 0 || d.seqlen_k == 0;
  RINGPACK_CHECK(empty || (step.q && step.k && step.v && step.segment_ids_q && step.positions_q &&
                           step.segment_ids_k && step.positions_k),
                 backend, " backend: a step tensor (q, k, v, segment ids or positions) is null");
}

void AttentionBackend::forward_direct(const AttentionStep& step, void* out, float* lse) {
  check_attention_step(step, name());
  const AttentionDims& d = step.dims;
  RINGPACK_CHECK(out != nullptr && lse != nullptr, name(),
                 " backend: forward outputs are missing (out / lse)");
  const size_t out_count = size_t(d.batch) * d.seqlen_q * d.num_heads_q * d.head_dim;
  const size_t lse_count = size_t(d.batch) * d.num_heads_q * d.seqlen_q;
  fill(lse, lse_count, -std::numeric_limits<float>::infinity());
  if (step.dtype == DType::kF32) {  // out is the accumulator itself
    fill(static_cast<float*>(out), out_count, 0.0f);
    forward(step, {static_cast<float*>(out), lse});
    return;
  }
  // An fp32 accumulator, freed on every path (stream-ordered on a device, so after the cast).
  struct Scratch {
    AttentionBackend& backend;
    float* data;
    ~Scratch() { backend.deallocate(data); }
  } acc{*this, static_cast<float*>(allocate(out_count * sizeof(float)))};
  fill(acc.data, out_count, 0.0f);
  forward(step, {acc.data, lse});
  cast_from_f32(out, step.dtype, acc.data, out_count);
}

}  // namespace ringpack
