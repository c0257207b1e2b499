// The CP schedules behind cp_forward / cp_backward (docs/design.md §4) and what they share.
//
// dispatch.cpp validates the inputs, resets the stats and times the whole call; ring.cpp and
// all_gather.cpp hold one strategy each. All tensors stay in the backend's memory space.
#pragma once

#include <cstddef>

#include "cp/kv_pack.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/cp.h"

namespace ringpack {

void ring_forward(const ShardInputs& in, AttentionBackend& backend, Communicator& comm,
                  const ForwardOutputs& out, ScheduleStats& stats);
void ring_backward(const ShardInputs& in, const void* out, const float* lse, const void* dout,
                   AttentionBackend& backend, Communicator& comm, const BackwardOutputs& grads,
                   ScheduleStats& stats);
void all_gather_forward(const ShardInputs& in, AttentionBackend& backend, Communicator& comm,
                        const ForwardOutputs& out, ScheduleStats& stats);
void all_gather_backward(const ShardInputs& in, const void* out, const float* lse, const void* dout,
                         AttentionBackend& backend, Communicator& comm,
                         const BackwardOutputs& grads, ScheduleStats& stats);

// Elements of the query-side tensors [batch, n, num_heads_q, head_dim] of a shard.
inline size_t q_elements(const AttentionDims& dims) {
  return size_t(dims.batch) * size_t(dims.seqlen_q) * size_t(dims.num_heads_q) *
         size_t(dims.head_dim);
}
// Elements of the key-side tensors [batch, seqlen_k, num_heads_kv, head_dim].
inline size_t kv_elements(const AttentionDims& dims) {
  return size_t(dims.batch) * size_t(dims.seqlen_k) * size_t(dims.num_heads_kv) *
         size_t(dims.head_dim);
}
// Elements of lse / delta [batch, num_heads_q, n].
inline size_t lse_elements(const AttentionDims& dims) {
  return size_t(dims.batch) * size_t(dims.num_heads_q) * size_t(dims.seqlen_q);
}

// The step of this shard's queries against `kv`, a block of `seqlen_k` tokens per row.
inline AttentionStep make_step(const ShardInputs& in, const KvView& kv, int seqlen_k) {
  AttentionStep step;
  step.dims = in.dims;
  step.dims.seqlen_k = seqlen_k;
  step.dtype = in.dtype;
  step.mask = in.mask;
  step.scale = in.scale;
  step.q = in.q;
  step.k = kv.k;
  step.v = kv.v;
  step.segment_ids_q = in.segment_ids;
  step.positions_q = in.positions;
  step.segment_ids_k = kv.segment_ids;
  step.positions_k = kv.positions;
  return step;
}

// Whether this rank's queries see some key of rank src's shard (empty step_visible: assume so).
inline bool step_is_visible(const ShardInputs& in, int src) {
  return in.step_visible.empty() || in.step_visible[size_t(src)];
}

}  // namespace ringpack
