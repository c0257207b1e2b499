// The ring (pass-KV) schedule, forward and backward (docs/design.md §4).
//
// At step s rank r holds the KV pack of rank src = (r - s) mod cp. KV is double-buffered: the
// isend of the current pack to r+1 and the irecv of the next one from r-1 are posted before the
// step computes, so the transfer of step s+1 overlaps the compute of step s. The running
// output / LSE (forward) and dQ, dK, dV (backward) accumulators stay fp32 across steps.
#include <limits>
#include <memory>

#include "cp/device_buffer.h"
#include "cp/kv_pack.h"
#include "cp/schedules.h"

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

// A posted exchange with the ring neighbours: send to next, receive from prev.
struct RingExchange {
  std::unique_ptr<CommRequest> send;
  std::unique_ptr<CommRequest> recv;

  void wait(ScheduleStats& stats) {
    ScopedTimer timer(stats.wait_seconds);
    if (send) send->wait();
    if (recv) recv->wait();
  }
};

RingExchange post_exchange(Communicator& comm, const void* send, void* recv, size_t bytes) {
  const RingPeers peers = ring_peers(comm);
  RingExchange exchange;
  exchange.send = comm.isend(send, bytes, peers.next);
  exchange.recv = comm.irecv(recv, bytes, peers.prev);
  return exchange;
}

}  // namespace

void ring_forward(const ShardInputs& in, AttentionBackend& backend, Communicator& comm,
                  const ForwardOutputs& out, ScheduleStats& stats) {
  const int cp = comm.size();
  const AttentionDims& dims = in.dims;
  const KvPackLayout layout = make_kv_pack_layout(dims, in.dtype);

  // kv[i]: KV packs, double-buffered (the second one only when there is a ring to pass on).
  DeviceBuffer kv[2] = {DeviceBuffer(backend, layout.total_bytes),
                        DeviceBuffer(backend, cp > 1 ? layout.total_bytes : 0)};
  fill_kv_pack(backend, layout, in, kv[0].data());

  DeviceBuffer o_acc(backend, q_elements(dims) * sizeof(float));      // [batch, n, heads_q, D]
  DeviceBuffer lse_acc(backend, lse_elements(dims) * sizeof(float));  // [batch, heads_q, n]
  backend.fill(o_acc.as<float>(), q_elements(dims), 0.0f);
  backend.fill(lse_acc.as<float>(), lse_elements(dims), -std::numeric_limits<float>::infinity());
  const ForwardAccumulators acc{o_acc.as<float>(), lse_acc.as<float>()};
  backend.synchronize();  // the pack is complete before the first isend reads it

  int cur = 0;
  for (int s = 0; s < cp; ++s) {
    const int src = step_source(comm, s);
    RingExchange exchange;
    if (s + 1 < cp)
      exchange = post_exchange(comm, kv[cur].data(), kv[1 - cur].data(), layout.total_bytes);
    if (step_is_visible(in, src)) {
      ScopedTimer timer(stats.compute_seconds);
      backend.forward(make_step(in, kv_pack_view(layout, kv[cur].data()), dims.seqlen_k), acc);
      backend.synchronize();
      ++stats.steps_computed;
    } else {
      ++stats.steps_skipped;
    }
    exchange.wait(stats);
    cur = 1 - cur;
  }

  backend.cast_from_f32(out.out, in.dtype, o_acc.as<float>(), q_elements(dims));
  backend.copy(out.lse, lse_acc.data(), lse_elements(dims) * sizeof(float));
  backend.synchronize();
}

void ring_backward(const ShardInputs& in, const void* out, const float* lse, const void* dout,
                   AttentionBackend& backend, Communicator& comm, const BackwardOutputs& grads,
                   ScheduleStats& stats) {
  const int cp = comm.size();
  const AttentionDims& dims = in.dims;
  const KvPackLayout layout = make_kv_pack_layout(dims, in.dtype);
  const size_t kv_count = kv_elements(dims);
  // One block's dK/dV accumulator: [2][batch, n, heads_kv, D] fp32, dK then dV, one message.
  const size_t dkv_bytes = 2 * kv_count * sizeof(float);

  DeviceBuffer kv[2] = {DeviceBuffer(backend, layout.total_bytes),
                        DeviceBuffer(backend, cp > 1 ? layout.total_bytes : 0)};
  DeviceBuffer dkv[2] = {DeviceBuffer(backend, dkv_bytes),
                         DeviceBuffer(backend, cp > 1 ? dkv_bytes : 0)};
  fill_kv_pack(backend, layout, in, kv[0].data());
  backend.fill(dkv[0].as<float>(), 2 * kv_count, 0.0f);

  DeviceBuffer delta(backend, lse_elements(dims) * sizeof(float));  // [batch, heads_q, n]
  backend.compute_delta(dout, out, in.dtype, dims, delta.as<float>());
  DeviceBuffer dq_acc(backend, q_elements(dims) * sizeof(float));  // [batch, n, heads_q, D]
  backend.fill(dq_acc.as<float>(), q_elements(dims), 0.0f);
  const BackwardInputs backward_in{dout, lse, delta.as<float>()};
  backend.synchronize();  // the pack is complete before the first isend reads it

  int cur = 0;  // kv[cur] holds block src, dkv[cur] its accumulator
  for (int s = 0; s < cp; ++s) {
    const int src = step_source(comm, s);
    RingExchange kv_exchange;
    if (s + 1 < cp)
      kv_exchange = post_exchange(comm, kv[cur].data(), kv[1 - cur].data(), layout.total_bytes);
    if (step_is_visible(in, src)) {
      ScopedTimer timer(stats.compute_seconds);
      float* dk = dkv[cur].as<float>();
      backend.backward(make_step(in, kv_pack_view(layout, kv[cur].data()), dims.seqlen_k),
                       backward_in, BackwardAccumulators{dq_acc.as<float>(), dk, dk + kv_count});
      backend.synchronize();
      ++stats.steps_computed;
    } else {
      ++stats.steps_skipped;
    }
    // Pass the accumulator on with its block; after cp hops (the last one at s = cp - 1) every
    // accumulator is back with its owner. cp = 1: it never left.
    RingExchange dkv_exchange;
    if (cp > 1) dkv_exchange = post_exchange(comm, dkv[cur].data(), dkv[1 - cur].data(), dkv_bytes);
    kv_exchange.wait(stats);
    dkv_exchange.wait(stats);
    if (cp > 1) cur = 1 - cur;
  }

  const float* dk_acc = dkv[cur].as<float>();
  backend.cast_from_f32(grads.dq, in.dtype, dq_acc.as<float>(), q_elements(dims));
  backend.cast_from_f32(grads.dk, in.dtype, dk_acc, kv_count);
  backend.cast_from_f32(grads.dv, in.dtype, dk_acc + kv_count, kv_count);
  backend.synchronize();
}

}  // namespace ringpack
