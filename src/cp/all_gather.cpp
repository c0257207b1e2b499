// The all_gather schedule, forward and backward (docs/design.md §4).
//
// Every rank gathers the KV packs of all shards, rearranges them into whole-row tensors and
// computes its queries against the whole row in one step; the mask (rule (1)) uses the gathered
// segment ids and positions, so any reorder is exact. Backward computes dK/dV (fp32) for the
// whole row and reduce-scatters them to their owners.
#include <algorithm>
#include <limits>

#include "cp/device_buffer.h"
#include "cp/kv_pack.h"
#include "cp/schedules.h"
#include "cp/step_recorder.h"

namespace ringpack {
namespace {

// row[b][p] = ranks[p][b] for chunks of chunk_bytes: ranks is [cp][batch] chunks, rank p's at
// ranks + p * rank_stride; row is [batch][cp] chunks (one whole row of cp * n tokens per b).
void ranks_to_row(AttentionBackend& backend, void* row, const void* ranks, size_t rank_stride,
                  int cp, int batch, size_t chunk_bytes) {
  auto* dst = static_cast<std::byte*>(row);
  const auto* src = static_cast<const std::byte*>(ranks);
  for (int p = 0; p < cp; ++p) {
    for (int b = 0; b < batch; ++b) {
      backend.copy(dst + (size_t(b) * size_t(cp) + size_t(p)) * chunk_bytes,
                   src + size_t(p) * rank_stride + size_t(b) * chunk_bytes, chunk_bytes);
    }
  }
}

// The inverse of ranks_to_row: ranks[p][b] = row[b][p].
void row_to_ranks(AttentionBackend& backend, void* ranks, size_t rank_stride, const void* row,
                  int cp, int batch, size_t chunk_bytes) {
  auto* dst = static_cast<std::byte*>(ranks);
  const auto* src = static_cast<const std::byte*>(row);
  for (int p = 0; p < cp; ++p) {
    for (int b = 0; b < batch; ++b) {
      backend.copy(dst + size_t(p) * rank_stride + size_t(b) * chunk_bytes,
                   src + (size_t(b) * size_t(cp) + size_t(p)) * chunk_bytes, chunk_bytes);
    }
  }
}

// K, V, segment ids and positions of whole rows: [batch, cp * n, ...].
struct GatheredRow {
  DeviceBuffer k;
  DeviceBuffer v;
  DeviceBuffer segment_ids;
  DeviceBuffer positions;

  KvView view() const {
    return KvView{k.data(), v.data(), segment_ids.as<const int32_t>(),
                  positions.as<const int32_t>()};
  }
};

GatheredRow gather_row(const ShardInputs& in, AttentionBackend& backend, Communicator& comm,
                       StepRecorder& recorder) {
  const int cp = comm.size();
  const int batch = in.dims.batch;
  const KvPackLayout layout = make_kv_pack_layout(in.dims, in.dtype);
  DeviceBuffer pack(backend, layout.total_bytes);
  fill_kv_pack(backend, layout, in, pack.data());
  DeviceBuffer gathered(backend, size_t(cp) * layout.total_bytes);  // [cp][pack]
  recorder.collective([&] { comm.all_gather(pack.data(), gathered.data(), layout.total_bytes); });

  GatheredRow row{DeviceBuffer(backend, size_t(cp) * layout.kv_bytes),
                  DeviceBuffer(backend, size_t(cp) * layout.kv_bytes),
                  DeviceBuffer(backend, size_t(cp) * layout.token_bytes),
                  DeviceBuffer(backend, size_t(cp) * layout.token_bytes)};
  const size_t kv_chunk = layout.kv_bytes / size_t(batch);        // one row of one shard
  const size_t token_chunk = layout.token_bytes / size_t(batch);  // one row of one shard
  ranks_to_row(backend, row.k.data(), gathered.at(layout.k_offset), layout.total_bytes, cp, batch,
               kv_chunk);
  ranks_to_row(backend, row.v.data(), gathered.at(layout.v_offset), layout.total_bytes, cp, batch,
               kv_chunk);
  ranks_to_row(backend, row.segment_ids.data(), gathered.at(layout.segment_ids_offset),
               layout.total_bytes, cp, batch, token_chunk);
  ranks_to_row(backend, row.positions.data(), gathered.at(layout.positions_offset),
               layout.total_bytes, cp, batch, token_chunk);
  return row;
}

// step_visible is not needed to skip work here (one step); only a rank that sees nothing skips.
bool any_step_visible(const ShardInputs& in) {
  return in.step_visible.empty() ||
         std::find(in.step_visible.begin(), in.step_visible.end(), true) != in.step_visible.end();
}

}  // namespace

void all_gather_forward(const ShardInputs& in, AttentionBackend& backend, Communicator& comm,
                        const ForwardOutputs& out, ScheduleStats& stats) {
  const AttentionDims& dims = in.dims;
  const int seqlen_row = comm.size() * dims.seqlen_k;
  StepRecorder recorder(backend, comm);
  const NvtxRange range("all_gather forward", 0);
  const GatheredRow row = gather_row(in, backend, comm, recorder);

  DeviceBuffer o_acc(backend, q_elements(dims) * sizeof(float));      // [batch, n, heads_q, D]
  DeviceBuffer lse_acc(backend, lse_elements(dims) * sizeof(float));  // [batch, heads_q, n]
  backend.fill(o_acc.as<float>(), q_elements(dims), 0.0f);
  backend.fill(lse_acc.as<float>(), lse_elements(dims), -std::numeric_limits<float>::infinity());
  if (any_step_visible(in)) {
    const size_t begin = recorder.mark();
    backend.forward(make_step(in, row.view(), seqlen_row),
                    ForwardAccumulators{o_acc.as<float>(), lse_acc.as<float>()});
    recorder.compute("compute", 0, begin, recorder.mark());
    ++stats.steps_computed;
  } else {
    ++stats.steps_skipped;
  }

  backend.cast_from_f32(out.out, in.dtype, o_acc.as<float>(), q_elements(dims));
  backend.copy(out.lse, lse_acc.data(), lse_elements(dims) * sizeof(float));
  recorder.finish(stats);
}

void all_gather_backward(const ShardInputs& in, const void* out, const float* lse, const void* dout,
                         AttentionBackend& backend, Communicator& comm,
                         const BackwardOutputs& grads, ScheduleStats& stats) {
  const int cp = comm.size();
  const AttentionDims& dims = in.dims;
  const int seqlen_row = cp * dims.seqlen_k;
  const size_t kv_count = kv_elements(dims);  // of one shard
  StepRecorder recorder(backend, comm);
  const NvtxRange range("all_gather backward", 0);
  const GatheredRow row = gather_row(in, backend, comm, recorder);

  DeviceBuffer delta(backend, lse_elements(dims) * sizeof(float));  // [batch, heads_q, n]
  backend.compute_delta(dout, out, in.dtype, dims, delta.as<float>());
  DeviceBuffer dq_acc(backend, q_elements(dims) * sizeof(float));  // [batch, n, heads_q, D]
  backend.fill(dq_acc.as<float>(), q_elements(dims), 0.0f);
  // dK and dV of the whole row: [2][batch, cp * n, heads_kv, D] fp32, dK then dV.
  DeviceBuffer dkv_row(backend, 2 * size_t(cp) * kv_count * sizeof(float));
  float* dk_row = dkv_row.as<float>();
  backend.fill(dk_row, 2 * size_t(cp) * kv_count, 0.0f);
  if (any_step_visible(in)) {
    const size_t begin = recorder.mark();
    backend.backward(make_step(in, row.view(), seqlen_row),
                     BackwardInputs{dout, lse, delta.as<float>()},
                     BackwardAccumulators{dq_acc.as<float>(), dk_row, dk_row + cp * kv_count});
    recorder.compute("compute", 0, begin, recorder.mark());
    ++stats.steps_computed;
  } else {
    ++stats.steps_skipped;
  }

  // Per owner: [cp][2][batch, n, heads_kv, D] fp32, then the sum over ranks lands at the owner.
  const size_t owner_bytes = 2 * kv_count * sizeof(float);
  const size_t chunk_bytes = kv_count * sizeof(float) / size_t(dims.batch);
  DeviceBuffer dkv_owners(backend, size_t(cp) * owner_bytes);
  row_to_ranks(backend, dkv_owners.data(), owner_bytes, dk_row, cp, dims.batch, chunk_bytes);
  row_to_ranks(backend, dkv_owners.at(owner_bytes / 2), owner_bytes, dk_row + cp * kv_count, cp,
               dims.batch, chunk_bytes);
  DeviceBuffer dkv(backend, owner_bytes);  // [2][batch, n, heads_kv, D]
  recorder.collective(
      [&] { comm.reduce_scatter_sum(dkv_owners.as<float>(), dkv.as<float>(), 2 * kv_count); });

  backend.cast_from_f32(grads.dq, in.dtype, dq_acc.as<float>(), q_elements(dims));
  backend.cast_from_f32(grads.dk, in.dtype, dkv.as<float>(), kv_count);
  backend.cast_from_f32(grads.dv, in.dtype, dkv.as<float>() + kv_count, kv_count);
  recorder.finish(stats);
}

}  // namespace ringpack
