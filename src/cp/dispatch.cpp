// cp_forward / cp_backward: validate one rank's shard, pick the strategy, and fill the stats
// (docs/design.md §4, §5). The schedules themselves are ring.cpp and all_gather.cpp.
#include "cp/schedules.h"
#include "ringpack/cp.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// `backward`: the shard is about to run the backward (the forward's checks apply too).
void check_shard(const ShardInputs& in, AttentionBackend& backend, const Communicator& comm,
                 bool backward) {
  const AttentionDims& dims = in.dims;
  RINGPACK_CHECK(dims.batch > 0 && dims.seqlen_q > 0 && dims.num_heads_q > 0 &&
                     dims.num_heads_kv > 0 && dims.head_dim > 0,
                 "shard dims must be positive: batch ", dims.batch, ", seqlen ", dims.seqlen_q,
                 ", num_heads_q ", dims.num_heads_q, ", num_heads_kv ", dims.num_heads_kv,
                 ", head_dim ", dims.head_dim);
  RINGPACK_CHECK(dims.seqlen_q == dims.seqlen_k, "shard seqlen_q ", dims.seqlen_q, " != seqlen_k ",
                 dims.seqlen_k, ": a shard holds the same n = seq_len / cp tokens of Q and of K/V");
  RINGPACK_CHECK(dims.num_heads_q % dims.num_heads_kv == 0, "num_heads_q ", dims.num_heads_q,
                 " is not a multiple of num_heads_kv ", dims.num_heads_kv,
                 ": use a kv head count that divides the query head count");
  RINGPACK_CHECK(in.step_visible.empty() || in.step_visible.size() == size_t(comm.size()),
                 "step_visible has ", in.step_visible.size(), " entries for cp = ", comm.size(),
                 ": give one per rank, or none to compute every step");
  RINGPACK_CHECK(in.q != nullptr && in.k != nullptr && in.v != nullptr &&
                     in.segment_ids != nullptr && in.positions != nullptr,
                 "shard inputs q, k, v, segment_ids and positions must all be set");
  backend.check_supported(in.dtype, dims.head_dim, backward);
}

// Resets stats, runs the schedule (which times itself), and records the bytes sent.
template <class Schedule>
void run_schedule(Communicator& comm, ScheduleStats& stats, Schedule&& schedule) {
  stats = ScheduleStats{};
  const uint64_t bytes_before = comm.bytes_sent();
  schedule();
  stats.bytes_sent = comm.bytes_sent() - bytes_before;
}

}  // namespace

void cp_forward(Strategy strategy, const ShardInputs& in, AttentionBackend& backend,
                Communicator& comm, const ForwardOutputs& out, ScheduleStats& stats) {
  check_shard(in, backend, comm, /*backward=*/false);
  RINGPACK_CHECK(out.out != nullptr && out.lse != nullptr,
                 "forward outputs out and lse must both be set");
  run_schedule(comm, stats, [&] {
    switch (strategy) {
      case Strategy::kRing:
        return ring_forward(in, backend, comm, out, stats);
      case Strategy::kAllGather:
        return all_gather_forward(in, backend, comm, out, stats);
    }
    RINGPACK_FAIL("unknown CP strategy ", int(strategy), ": use ring or all_gather");
  });
}

void cp_backward(Strategy strategy, const ShardInputs& in, const void* out, const float* lse,
                 const void* dout, AttentionBackend& backend, Communicator& comm,
                 const BackwardOutputs& grads, ScheduleStats& stats) {
  check_shard(in, backend, comm, /*backward=*/true);
  RINGPACK_CHECK(out != nullptr && lse != nullptr && dout != nullptr,
                 "backward inputs out, lse and dout must all be set");
  RINGPACK_CHECK(grads.dq != nullptr && grads.dk != nullptr && grads.dv != nullptr,
                 "backward outputs dq, dk and dv must all be set");
  run_schedule(comm, stats, [&] {
    switch (strategy) {
      case Strategy::kRing:
        return ring_backward(in, out, lse, dout, backend, comm, grads, stats);
      case Strategy::kAllGather:
        return all_gather_backward(in, out, lse, dout, backend, comm, grads, stats);
    }
    RINGPACK_FAIL("unknown CP strategy ", int(strategy), ": use ring or all_gather");
  });
}

}  // namespace ringpack
