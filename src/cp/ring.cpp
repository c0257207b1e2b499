// The ring (pass-KV) schedule, forward and backward (docs/design.md §4), in stream order.
//
// At step s rank r holds the KV pack of rank src = (r - s) mod cp. KV is double-buffered: the
// exchange that brings the next pack (send the current one to r+1, receive from r-1) is posted
// before the step computes, so the transfer of step s+1 runs during the compute of step s; the
// compute stream waits for it only after the step's kernels are enqueued. Nothing in the loop
// waits on the host; StepRecorder::finish is the one host wait of the call.
//
// Backward: each block's dK/dV accumulator (fp32) travels around the ring one step behind its
// KV. At step s a rank computes its contribution to block src into `partial`, then waits for the
// accumulator of block src (sent by r-1 at its step s-1, overlapping this step's compute), adds
// `partial` into it and sends it on. After the last step every accumulator lands at its owner:
// only that last hop is exposed.
#include <limits>
#include <memory>

#include "cp/device_buffer.h"
#include "cp/kv_pack.h"
#include "cp/schedules.h"
#include "cp/step_recorder.h"

namespace ringpack {
namespace {

// The neighbours of a rank on the ring.
struct RingPeers {
  int next;  // r + 1: where blocks go
  int prev;  // r - 1: where blocks come from
};

RingPeers ring_peers(const Communicator& comm) {
  const int cp = comm.size();
  return RingPeers{(comm.rank() + 1) % cp, (comm.rank() + cp - 1) % cp};
}

// Rank whose block this rank holds at step s.
int step_source(const Communicator& comm, int s) {
  const int cp = comm.size();
  return ((comm.rank() - s) % cp + cp) % cp;
}

// Posts "send `send` to r+1, receive `recv` from r-1".
std::unique_ptr<CommRequest> pass_on(Communicator& comm, const void* send, void* recv,
                                     size_t bytes) {
  const RingPeers peers = ring_peers(comm);
  return comm.exchange(send, peers.next, recv, peers.prev, bytes);
}

}  // namespace

void ring_forward(const ShardInputs& in, AttentionBackend& backend, Communicator& comm,
                  const ForwardOutputs& out, ScheduleStats& stats) {
  const int cp = comm.size();
  const AttentionDims& dims = in.dims;
  const KvPackLayout layout = make_kv_pack_layout(dims, in.dtype);
  StepRecorder recorder(backend, comm);

  // kv[i]: KV packs, double-buffered (the second one only when there is a ring to pass on).
  DeviceBuffer kv[2] = {DeviceBuffer(backend, layout.total_bytes),
                        DeviceBuffer(backend, cp > 1 ? layout.total_bytes : 0)};
  fill_kv_pack(backend, layout, in, kv[0].data());

  DeviceBuffer o_acc(backend, q_elements(dims) * sizeof(float));      // [batch, n, heads_q, D]
  DeviceBuffer lse_acc(backend, lse_elements(dims) * sizeof(float));  // [batch, heads_q, n]
  backend.fill(o_acc.as<float>(), q_elements(dims), 0.0f);
  backend.fill(lse_acc.as<float>(), lse_elements(dims), -std::numeric_limits<float>::infinity());
  const ForwardAccumulators acc{o_acc.as<float>(), lse_acc.as<float>()};

  int cur = 0;
  for (int s = 0; s < cp; ++s) {
    const NvtxRange range("ring forward step", s);
    const int src = step_source(comm, s);
    std::unique_ptr<CommRequest> next_kv;
    if (s + 1 < cp) {
      next_kv = pass_on(comm, kv[cur].data(), kv[1 - cur].data(), layout.total_bytes);
    }
    if (step_is_visible(in, src)) {
      const size_t begin = recorder.mark();
      backend.forward(make_step(in, kv_pack_view(layout, kv[cur].data()), dims.seqlen_k), acc);
      recorder.compute("compute", s, begin, recorder.mark());
      ++stats.steps_computed;
    } else {
      ++stats.steps_skipped;
    }
    if (next_kv) recorder.wait(*next_kv, s + 1, "kv");
    cur = 1 - cur;
  }

  backend.cast_from_f32(out.out, in.dtype, o_acc.as<float>(), q_elements(dims));
  backend.copy(out.lse, lse_acc.data(), lse_elements(dims) * sizeof(float));
  recorder.finish(stats);
}

void ring_backward(const ShardInputs& in, const void* out, const float* lse, const void* dout,
                   AttentionBackend& backend, Communicator& comm, const BackwardOutputs& grads,
                   ScheduleStats& stats) {
  const int cp = comm.size();
  const AttentionDims& dims = in.dims;
  const KvPackLayout layout = make_kv_pack_layout(dims, in.dtype);
  const size_t kv_count = kv_elements(dims);
  // A block's dK/dV accumulator: [2][batch, n, heads_kv, D] fp32, dK then dV, one message.
  const size_t dkv_count = 2 * kv_count;
  const size_t dkv_bytes = dkv_count * sizeof(float);
  StepRecorder recorder(backend, comm);

  DeviceBuffer kv[2] = {DeviceBuffer(backend, layout.total_bytes),
                        DeviceBuffer(backend, cp > 1 ? layout.total_bytes : 0)};
  // dkv[i]: accumulators arriving from r-1 (double-buffered: one is sent on while the next
  // arrives); partial: this rank's contribution to the block of the current step.
  DeviceBuffer dkv[2] = {DeviceBuffer(backend, dkv_bytes),
                         DeviceBuffer(backend, cp > 1 ? dkv_bytes : 0)};
  DeviceBuffer partial(backend, dkv_bytes);
  fill_kv_pack(backend, layout, in, kv[0].data());
  backend.fill(dkv[0].as<float>(), dkv_count, 0.0f);  // step 0's block is our own: starts at 0

  DeviceBuffer delta(backend, lse_elements(dims) * sizeof(float));  // [batch, heads_q, n]
  backend.compute_delta(dout, out, in.dtype, dims, delta.as<float>());
  DeviceBuffer dq_acc(backend, q_elements(dims) * sizeof(float));  // [batch, n, heads_q, D]
  backend.fill(dq_acc.as<float>(), q_elements(dims), 0.0f);
  const BackwardInputs backward_in{dout, lse, delta.as<float>()};

  int cur = 0;      // kv[cur] holds block src
  int arrived = 0;  // dkv[arrived] receives (or, at step 0, holds) block src's accumulator
  std::unique_ptr<CommRequest> incoming_dkv;  // the exchange that brings dkv[arrived]
  for (int s = 0; s < cp; ++s) {
    const NvtxRange range("ring backward step", s);
    const int src = step_source(comm, s);
    std::unique_ptr<CommRequest> next_kv;
    if (s + 1 < cp) {
      next_kv = pass_on(comm, kv[cur].data(), kv[1 - cur].data(), layout.total_bytes);
    }
    const bool visible = step_is_visible(in, src);
    if (visible) {
      const size_t begin = recorder.mark();
      backend.fill(partial.as<float>(), dkv_count, 0.0f);
      float* dk = partial.as<float>();
      backend.backward(make_step(in, kv_pack_view(layout, kv[cur].data()), dims.seqlen_k),
                       backward_in, BackwardAccumulators{dq_acc.as<float>(), dk, dk + kv_count});
      recorder.compute("compute", s, begin, recorder.mark());
      ++stats.steps_computed;
    } else {
      ++stats.steps_skipped;
    }
    // Block src's accumulator, sent by r-1 one step ago, is needed only now.
    if (incoming_dkv) recorder.wait(*incoming_dkv, s, "dkv");
    if (visible) {
      const size_t begin = recorder.mark();
      backend.accumulate(dkv[arrived].as<float>(), partial.as<float>(), dkv_count);
      recorder.compute("dkv add", s, begin, recorder.mark());
    }
    // Pass it on: after the hop of the last step (s = cp - 1) each accumulator is at its owner.
    if (cp > 1) {
      incoming_dkv = pass_on(comm, dkv[arrived].data(), dkv[1 - arrived].data(), dkv_bytes);
      arrived = 1 - arrived;
    }
    if (next_kv) recorder.wait(*next_kv, s + 1, "kv");
    cur = 1 - cur;
  }
  if (incoming_dkv) recorder.wait(*incoming_dkv, cp, "dkv");  // the last, exposed hop

  const float* dk_acc = dkv[arrived].as<float>();
  backend.cast_from_f32(grads.dq, in.dtype, dq_acc.as<float>(), q_elements(dims));
  backend.cast_from_f32(grads.dk, in.dtype, dk_acc, kv_count);
  backend.cast_from_f32(grads.dv, in.dtype, dk_acc + kv_count, kv_count);
  recorder.finish(stats);
}

}  // namespace ringpack
