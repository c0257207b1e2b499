// One rank's part of a run: upload its shard to the backend, run the CP schedule forward and
// backward, and download the results.
#pragma once

#include <vector>

#include "job/host_tensors.h"
#include "ringpack/job.h"

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

RankResult run_rank(const RankShard& shard, const RunOptions& options, const BatchOptions& batch,
                    Communicator& comm);

}  // namespace ringpack
