// bench_cp_job: the whole CP forward and backward timed on one batch, against the same batch as
// one rank on one device (job.h; method in docs/design.md §8).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <vector>

#include "job/rank_exchange.h"
#include "job/rank_runner.h"
#include "job/rank_world.h"
#include "job/resolve.h"
#include "ringpack/error.h"
#include "ringpack/job.h"

namespace ringpack {
namespace {

double median(std::vector<double> values) {
  RINGPACK_CHECK(!values.empty(), "median of no values: use --reps 1 or more");
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// One rank's medians (trivially copyable: they travel through all_gather_bytes).
struct RankTimes {
  double forward_seconds = 0.0;  // a rep: barrier to barrier, so the slowest rank's time
  double backward_seconds = 0.0;
  double forward_exposed = 0.0;  // the share of this rank's loop spent waiting for transfers
  double backward_exposed = 0.0;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Runs the forward and backward of this rank `warmup + reps` times on resident buffers.
RankTimes time_rank(const RankShard& shard, const BatchOptions& o, int reps, int warmup,
                    AttentionBackend& backend, Communicator& comm) {
  RankBuffers buffers(shard, o, backend);
  std::vector<double> forward, backward, forward_exposed, backward_exposed;
  for (int rep = 0; rep < warmup + reps; ++rep) {
    ScheduleStats stats;
    comm.barrier();
    auto start = std::chrono::steady_clock::now();
    buffers.forward(o.strategy, backend, comm, stats);
    comm.barrier();
    const double forward_wall = seconds_since(start);
    const double forward_share =
        stats.total_seconds > 0 ? stats.wait_seconds / stats.total_seconds : 0;
    start = std::chrono::steady_clock::now();
    buffers.backward(o.strategy, backend, comm, stats);
    comm.barrier();
    const double backward_wall = seconds_since(start);
    if (rep < warmup) continue;
    forward.push_back(forward_wall);
    forward_exposed.push_back(forward_share);
    backward.push_back(backward_wall);
    backward_exposed.push_back(stats.total_seconds > 0 ? stats.wait_seconds / stats.total_seconds
                                                       : 0);
  }
  return RankTimes{median(forward), median(backward), median(forward_exposed),
                   median(backward_exposed)};
}

// Every rank's times: max over ranks.
RankTimes slowest(const std::vector<std::vector<std::byte>>& all) {
  RankTimes worst;
  for (const std::vector<std::byte>& bytes : all) {
    RankTimes t;
    RINGPACK_CHECK(bytes.size() == sizeof(t), "a rank's timings arrived with ", bytes.size(),
                   " bytes");
    std::memcpy(&t, bytes.data(), sizeof(t));
    worst.forward_seconds = std::max(worst.forward_seconds, t.forward_seconds);
    worst.backward_seconds = std::max(worst.backward_seconds, t.backward_seconds);
    worst.forward_exposed = std::max(worst.forward_exposed, t.forward_exposed);
    worst.backward_exposed = std::max(worst.backward_exposed, t.backward_exposed);
  }
  return worst;
}

// Times `shards` (one per rank) over the ranks of `run`; returns the slowest rank's medians and,
// through process_rank, this process's rank.
RankTimes time_shards(const RunOptions& run, const std::vector<RankShard>& shards, int reps,
                      int warmup, int* process_rank) {
  const BatchOptions& o = run.batch;
  RankTimes result;
  std::mutex mutex;
  for_each_rank(run, o.cp, [&](AttentionBackend& backend, Communicator& comm) {
    const RankTimes mine = time_rank(shards[size_t(comm.rank())], o, reps, warmup, backend, comm);
    std::vector<std::byte> bytes(sizeof(mine));
    std::memcpy(bytes.data(), &mine, sizeof(mine));
    const RankTimes worst = slowest(all_gather_bytes(backend, comm, bytes));
    std::lock_guard<std::mutex> lock(mutex);
    result = worst;
    if (process_rank != nullptr && is_multi_process(resolve_comm(run))) *process_rank = comm.rank();
  });
  return result;
}

}  // namespace

CpBenchReport bench_cp_job(const CpBenchOptions& options, const ProgressFn& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  RINGPACK_CHECK(options.reps >= 1 && options.warmup >= 0, "--reps ", options.reps,
                 " and --warmup ", options.warmup, ": use at least 1 rep and no negative warmup");
  CpBenchReport report;
  RunOptions run = options.run;
  BatchOptions& o = run.batch;
  {
    auto probe = make_backend(run.backend, run.backend_options);
    probe->check_supported(o.dtype, o.head_dim, /*backward=*/true);
    report.backend = probe->name();
  }
  say("building the batch");
  const PackedBatch batch = build_resolved_batch(
      o, [](const BatchOptions& sizes) { return run_bytes_needed(sizes, true, false); }, "bench");
  std::string reason;
  const ReorderSpec spec = resolve_reorder(batch, o.reorder, plan_config(o, run.backend), &reason);
  o.reorder = spec;
  report.reorder = reorder_label(spec);
  const ReorderAnalysis analysis = analyse_reorder(batch, spec, plan_config(o, run.backend));
  report.visible_pairs = double(
      std::accumulate(analysis.visible_pairs.begin(), analysis.visible_pairs.end(), int64_t{0}));
  const RowTensors row = draw_row_inputs(batch, o);
  const CommKind comm = resolve_comm(run);
  report.comm = comm_kind_name(comm);
  report.devices = is_multi_process(comm) ? o.cp : 1;

  // The same row as one rank (a cp = 1 reorder is the identity) and as the cp shards.
  RunOptions single = run;
  single.batch.cp = 1;
  single.comm = run.backend == BackendKind::kCuda ? CommKind::kDevice : CommKind::kThreads;
  const ReorderSpec whole{ReorderKind::kContiguous, 1};
  const std::vector<RankShard> one_shard =
      make_shards(batch, row, reorder_index(batch.seq_len, 1, whole), 1,
                  analyse_reorder(batch, whole, plan_config(single.batch, run.backend)));
  const std::vector<RankShard> shards =
      make_shards(batch, row, reorder_index(batch.seq_len, o.cp, spec), o.cp, analysis);

  say("timing one rank on the whole batch");
  const RankTimes one = time_shards(single, one_shard, options.reps, options.warmup, nullptr);
  report.single_forward_seconds = one.forward_seconds;
  report.single_backward_seconds = one.backward_seconds;

  say("timing " + std::to_string(o.cp) + " ranks (" + report.comm + ", " + report.reorder + ")");
  const RankTimes cp = time_shards(run, shards, options.reps, options.warmup, &report.process_rank);
  report.forward_seconds = cp.forward_seconds;
  report.backward_seconds = cp.backward_seconds;
  report.forward_exposed = cp.forward_exposed;
  report.backward_exposed = cp.backward_exposed;
  report.options = o;
  return report;
}

}  // namespace ringpack
