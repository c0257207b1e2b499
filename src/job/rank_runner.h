// One rank's part of a run: upload its shard to the backend, run the CP schedule forward and
// backward, and download the results.
#pragma once

#include <vector>

#include "cp/device_buffer.h"
#include "job/host_tensors.h"
#include "job/verify.h"
#include "ringpack/attention.h"
#include "ringpack/comm.h"
#include "ringpack/cp.h"
#include "ringpack/job.h"
#include "ringpack/layout.h"
#include "ringpack/plan.h"

namespace ringpack {

// A rank's shard on the host: n reordered tokens per row.
struct RankShard {
  HostTensor q, k, v, dout;           // [batch, n, heads, head_dim], dtype
  HostTensor segment_ids, positions;  // [batch, n] int32
  std::vector<bool> step_visible;     // [cp], from the plan
};

struct RankResult {
  HostTensor out, dq, dk, dv;  // [batch, n, heads, head_dim], dtype
  HostTensor lse;              // [batch * num_heads_q, n] fp32
  RankReport report;
};

// Random Q, K, V and dO of a whole batch (seeds derived from options.seed).
RowTensors draw_row_inputs(const PackedBatch& batch, const BatchOptions& options);

// The `cp` shards of a batch: the rows permuted by the reorder `index`, cut into cp slices
// (shard_tokens), with each rank's visible steps from the plan's analysis.
std::vector<RankShard> make_shards(const PackedBatch& batch, const RowTensors& row,
                                   const std::vector<int32_t>& index, int cp,
                                   const ReorderAnalysis& analysis);

// A rank's shard resident in the backend's memory, with its output and gradient buffers, so the
// schedules can run on it repeatedly (run_rank once; the CP benchmark many times).
struct RankBuffers {
  RankBuffers(const RankShard& shard, const BatchOptions& batch, AttentionBackend& backend);
  void forward(Strategy strategy, AttentionBackend& backend, Communicator& comm,
               ScheduleStats& stats);
  void backward(Strategy strategy, AttentionBackend& backend, Communicator& comm,
                ScheduleStats& stats);  // after forward(): uses its out and lse

  DeviceBuffer q, k, v, dout, segment_ids, positions;  // the shard
  DeviceBuffer out, lse, dq, dk, dv;                   // results
  ShardInputs in;                                      // pointers into the above
};

RankResult run_rank(const RankShard& shard, const BatchOptions& batch, bool backward,
                    AttentionBackend& backend, Communicator& comm);

}  // namespace ringpack
