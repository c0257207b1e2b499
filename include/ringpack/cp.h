// CP strategies ring and all_gather, forward and backward (docs/design.md §4), backend-agnostic.
//
// Each rank calls these with its shard (n = seq_len / cp reordered tokens per row), a backend
// and a communicator; all buffers are in the backend's memory space.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ringpack/attention.h"
#include "ringpack/comm.h"

namespace ringpack {

enum class Strategy { kRing, kAllGather };

const char* strategy_name(Strategy strategy);  // "ring", "all_gather"
Strategy parse_strategy(std::string_view name);

// One rank's shard. dims.seqlen_q = dims.seqlen_k = n (the shard length).
struct ShardInputs {
  AttentionDims dims;
  DType dtype = DType::kF32;
  MaskSpec mask;
  float scale = 0.0f;                    // <= 0: 1/sqrt(head_dim)
  const void* q = nullptr;               // [batch, n, num_heads_q, head_dim]
  const void* k = nullptr;               // [batch, n, num_heads_kv, head_dim]
  const void* v = nullptr;               // [batch, n, num_heads_kv, head_dim]
  const int32_t* segment_ids = nullptr;  // [batch, n]
  const int32_t* positions = nullptr;    // [batch, n]
  // step_visible[src] is true when some query of this rank sees some key of rank src's shard
  // (from the plan, computed on the host before the run). Empty = assume every step visible.
  std::vector<bool> step_visible;
};

struct ForwardOutputs {
  void* out = nullptr;   // [batch, n, num_heads_q, head_dim], input dtype
  float* lse = nullptr;  // [batch, num_heads_q, n]
};

struct BackwardOutputs {
  void* dq = nullptr;  // [batch, n, num_heads_q, head_dim], input dtype
  void* dk = nullptr;  // [batch, n, num_heads_kv, head_dim], input dtype
  void* dv = nullptr;  // [batch, n, num_heads_kv, head_dim], input dtype
};

// One span of the step loop, in seconds from the start of the schedule call.
struct TraceSpan {
  enum class Lane { kCompute, kTransfer };
  Lane lane = Lane::kCompute;
  std::string name;  // "compute", "wait", "kv", "dkv", ...
  int step = 0;      // ring step (0 for all_gather's single step)
  double start_seconds = 0.0;
  double end_seconds = 0.0;
};

// Measured in stream order (a Timeline of the backend), so on a GPU they time the device work,
// not the host's enqueueing.
struct ScheduleStats {
  int steps_computed = 0;
  int steps_skipped = 0;
  uint64_t bytes_sent = 0;
  double compute_seconds = 0.0;  // attention, merges and gradient adds on the compute stream
  double wait_seconds = 0.0;     // the compute stream waiting for transfers (exposed comm)
  double total_seconds = 0.0;    // the whole call, first mark to the last
  std::vector<TraceSpan> spans;  // compute and wait spans, and transfers where recorded
};

void cp_forward(Strategy strategy, const ShardInputs& in, AttentionBackend& backend,
                Communicator& comm, const ForwardOutputs& out, ScheduleStats& stats);

// out and lse are the forward's outputs; dout is [batch, n, num_heads_q, head_dim].
void cp_backward(Strategy strategy, const ShardInputs& in, const void* out, const float* lse,
                 const void* dout, AttentionBackend& backend, Communicator& comm,
                 const BackwardOutputs& grads, ScheduleStats& stats);

}  // namespace ringpack
