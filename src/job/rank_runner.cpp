// run_rank: the backend buffers of one rank and its calls into the CP schedule.
#include "job/rank_runner.h"

#include <algorithm>

#include "core/random.h"
#include "cp/device_buffer.h"
#include "job/backend_transfers.h"

namespace ringpack {
namespace {

HostTensor bshd_tensor(const PackedBatch& batch, int heads, const BatchOptions& o, uint64_t seed) {
  HostTensor t;  // not sized here: its bytes come whole from random_normal_bytes
  t.rows = batch.batch;
  t.tokens = batch.seq_len;
  t.token_bytes = size_t(heads) * o.head_dim * dtype_size(o.dtype);
  const size_t count = size_t(batch.batch) * batch.seq_len * heads * o.head_dim;
  t.bytes = random_normal_bytes(count, seed, o.dtype);
  return t;
}

HostTensor int_tensor(const PackedBatch& batch, const std::vector<int32_t>& values) {
  HostTensor t(batch.batch, batch.seq_len, sizeof(int32_t));
  std::copy_n(reinterpret_cast<const std::byte*>(values.data()), t.size_bytes(), t.bytes.begin());
  return t;
}

double transfer_seconds(const std::vector<TraceSpan>& spans) {
  double seconds = 0.0;
  for (const TraceSpan& span : spans) {
    if (span.lane == TraceSpan::Lane::kTransfer) seconds += span.end_seconds - span.start_seconds;
  }
  return seconds;
}

}  // namespace

RowTensors draw_row_inputs(const PackedBatch& batch, const BatchOptions& o) {
  RowTensors row;
  row.q = bshd_tensor(batch, o.num_heads_q, o, o.seed * 4 + 1);
  row.k = bshd_tensor(batch, o.num_heads_kv, o, o.seed * 4 + 2);
  row.v = bshd_tensor(batch, o.num_heads_kv, o, o.seed * 4 + 3);
  row.dout = bshd_tensor(batch, o.num_heads_q, o, o.seed * 4 + 4);
  return row;
}

std::vector<RankShard> make_shards(const PackedBatch& batch, const RowTensors& row,
                                   const std::vector<int32_t>& index, int cp,
                                   const ReorderAnalysis& analysis) {
  const HostTensor ids = int_tensor(batch, batch.segment_ids);
  const HostTensor pos = int_tensor(batch, batch.positions);
  std::vector<RankShard> shards(static_cast<size_t>(cp));
  for (int r = 0; r < cp; ++r) {
    RankShard& shard = shards[size_t(r)];
    shard.q = shard_tokens(row.q, index, r, cp);
    shard.k = shard_tokens(row.k, index, r, cp);
    shard.v = shard_tokens(row.v, index, r, cp);
    shard.dout = shard_tokens(row.dout, index, r, cp);
    shard.segment_ids = shard_tokens(ids, index, r, cp);
    shard.positions = shard_tokens(pos, index, r, cp);
    shard.step_visible.resize(size_t(cp));
    for (int src = 0; src < cp; ++src)
      shard.step_visible[size_t(src)] = analysis.step_pairs[size_t(r)][size_t(src)] > 0;
  }
  return shards;
}

RankBuffers::RankBuffers(const RankShard& shard, const BatchOptions& batch,
                         AttentionBackend& backend)
    : q(upload(backend, shard.q)),
      k(upload(backend, shard.k)),
      v(upload(backend, shard.v)),
      dout(upload(backend, shard.dout)),
      segment_ids(upload(backend, shard.segment_ids)),
      positions(upload(backend, shard.positions)),
      out(backend, shard.q.size_bytes()),
      lse(backend,
          size_t(batch.batch) * size_t(batch.num_heads_q) * size_t(shard.q.tokens) * sizeof(float)),
      dq(backend, shard.q.size_bytes()),
      dk(backend, shard.k.size_bytes()),
      dv(backend, shard.v.size_bytes()) {
  const int n = shard.q.tokens;
  in.dims = {batch.batch, n, n, batch.num_heads_q, batch.num_heads_kv, batch.head_dim};
  in.dtype = batch.dtype;
  in.mask = batch.mask;
  in.q = q.data();
  in.k = k.data();
  in.v = v.data();
  in.segment_ids = segment_ids.as<int32_t>();
  in.positions = positions.as<int32_t>();
  in.step_visible = shard.step_visible;
}

void RankBuffers::forward(Strategy strategy, AttentionBackend& backend, Communicator& comm,
                          ScheduleStats& stats) {
  cp_forward(strategy, in, backend, comm, {out.data(), lse.as<float>()}, stats);
}

void RankBuffers::backward(Strategy strategy, AttentionBackend& backend, Communicator& comm,
                           ScheduleStats& stats) {
  cp_backward(strategy, in, out.data(), lse.as<float>(), dout.data(), backend, comm,
              {dq.data(), dk.data(), dv.data()}, stats);
}

RankResult run_rank(const RankShard& shard, const BatchOptions& batch, bool backward,
                    AttentionBackend& backend, Communicator& comm) {
  RankBuffers buffers(shard, batch, backend);
  const int n = shard.q.tokens;
  RankResult result;
  result.out = HostTensor(shard.q.rows, n, shard.q.token_bytes);
  result.lse = HostTensor(batch.batch * batch.num_heads_q, n, sizeof(float));

  ScheduleStats forward_stats;
  buffers.forward(batch.strategy, backend, comm, forward_stats);
  download(backend, buffers.out, result.out);
  download(backend, buffers.lse, result.lse);

  RankReport& report = result.report;
  report.rank = comm.rank();
  report.steps_computed = forward_stats.steps_computed;
  report.steps_skipped = forward_stats.steps_skipped;
  report.bytes_sent = forward_stats.bytes_sent;
  report.forward_seconds = forward_stats.total_seconds;
  report.compute_seconds = forward_stats.compute_seconds;
  report.wait_seconds = forward_stats.wait_seconds;
  report.transfer_seconds = transfer_seconds(forward_stats.spans);
  report.forward_spans = std::move(forward_stats.spans);
  if (!backward) return result;

  result.dq = HostTensor(shard.q.rows, n, shard.q.token_bytes);
  result.dk = HostTensor(shard.k.rows, n, shard.k.token_bytes);
  result.dv = HostTensor(shard.v.rows, n, shard.v.token_bytes);
  ScheduleStats backward_stats;
  buffers.backward(batch.strategy, backend, comm, backward_stats);
  download(backend, buffers.dq, result.dq);
  download(backend, buffers.dk, result.dk);
  download(backend, buffers.dv, result.dv);

  report.steps_computed += backward_stats.steps_computed;
  report.steps_skipped += backward_stats.steps_skipped;
  report.bytes_sent += backward_stats.bytes_sent;
  report.backward_seconds = backward_stats.total_seconds;
  report.compute_seconds += backward_stats.compute_seconds;
  report.wait_seconds += backward_stats.wait_seconds;
  report.transfer_seconds += transfer_seconds(backward_stats.spans);
  report.backward_spans = std::move(backward_stats.spans);
  return result;
}

}  // namespace ringpack
