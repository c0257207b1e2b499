// run_job: batch -> reorder -> shards -> CP forward/backward on `cp` ranks -> inverse reorder ->
// verification against the single-device fp64 reference (docs/design.md §3, §4, §7).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/random.h"
#include "job/rank_runner.h"
#include "job/resolve.h"
#include "job/verify.h"
#include "ringpack/error.h"
#include "ringpack/job.h"

namespace ringpack {
namespace {

class PhaseClock {
 public:
  explicit PhaseClock(std::vector<PhaseTime>& phases) : phases_(phases) {}
  void lap(const char* name) {
    const auto now = std::chrono::steady_clock::now();
    phases_.push_back({name, std::chrono::duration<double>(now - start_).count()});
    start_ = now;
  }

 private:
  std::vector<PhaseTime>& phases_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

void validate_shapes(const BatchOptions& o) {
  RINGPACK_CHECK(o.num_heads_q >= 1 && o.num_heads_kv >= 1, "head counts must be positive (got ",
                 o.num_heads_q, " query heads, ", o.num_heads_kv, " kv heads)");
  RINGPACK_CHECK(o.num_heads_q % o.num_heads_kv == 0, "num_heads_q ", o.num_heads_q,
                 " is not a multiple of num_heads_kv ", o.num_heads_kv,
                 "; GQA needs each kv head shared by the same number of query heads");
  RINGPACK_CHECK(o.head_dim >= 1, "head_dim ", o.head_dim, " must be positive");
  RINGPACK_CHECK(o.cp >= 1, "cp ", o.cp, " must be at least 1");
}

HostTensor bshd_tensor(const PackedBatch& batch, int heads, const BatchOptions& o, uint64_t seed) {
  HostTensor t(batch.batch, batch.seq_len, size_t(heads) * o.head_dim * dtype_size(o.dtype));
  const size_t count = size_t(batch.batch) * batch.seq_len * heads * o.head_dim;
  t.bytes = to_dtype_bytes(random_normal(count, seed), o.dtype);
  return t;
}

HostTensor int_tensor(const PackedBatch& batch, const std::vector<int32_t>& values) {
  HostTensor t(batch.batch, batch.seq_len, sizeof(int32_t));
  std::copy_n(reinterpret_cast<const std::byte*>(values.data()), t.size_bytes(), t.bytes.begin());
  return t;
}

}  // namespace

RunReport run_job(const RunOptions& options, const ProgressFn& progress) {
  auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  RunReport report;
  PhaseClock clock(report.phases);
  BatchOptions& o = report.options;
  o = options.batch;
  validate_shapes(o);
  {  // an unsupported forward or backward fails here, before any work or progress line
    auto probe = make_backend(options.backend, options.backend_options);
    probe->check_supported(o.dtype, o.head_dim, options.backward);
    report.backend = probe->name();
  }

  say("building the batch");
  const PackedBatch batch = build_resolved_batch(o);
  const std::vector<int> documents = count_documents(batch);
  report.documents = std::accumulate(documents.begin(), documents.end(), 0);
  report.padding_tokens = std::count(batch.segment_ids.begin(), batch.segment_ids.end(), 0);
  clock.lap("batch");

  say("planning the reorder");
  const PlanConfig config = plan_config(o);
  const ReorderSpec spec = resolve_reorder(batch, o.reorder, config, &report.reorder_reason);
  const ReorderAnalysis analysis = analyse_reorder(batch, spec, config);
  o.reorder = spec;
  report.reorder = reorder_label(spec);
  if (report.reorder_reason.empty()) report.reorder_reason = "requested";
  clock.lap("plan");

  say("drawing random inputs");
  RowTensors row;
  row.q = bshd_tensor(batch, o.num_heads_q, o, o.seed * 4 + 1);
  row.k = bshd_tensor(batch, o.num_heads_kv, o, o.seed * 4 + 2);
  row.v = bshd_tensor(batch, o.num_heads_kv, o, o.seed * 4 + 3);
  row.dout = bshd_tensor(batch, o.num_heads_q, o, o.seed * 4 + 4);
  const HostTensor segment_ids = int_tensor(batch, batch.segment_ids);
  const HostTensor positions = int_tensor(batch, batch.positions);

  say("sharding over " + std::to_string(o.cp) + " ranks (" + report.reorder + ")");
  const std::vector<int32_t> index = reorder_index(batch.seq_len, o.cp, spec);
  const int n = batch.seq_len / o.cp;
  std::vector<RankShard> shards(o.cp);
  {
    const HostTensor q = permute_tokens(row.q, index), k = permute_tokens(row.k, index);
    const HostTensor v = permute_tokens(row.v, index), dout = permute_tokens(row.dout, index);
    const HostTensor ids = permute_tokens(segment_ids, index);
    const HostTensor pos = permute_tokens(positions, index);
    for (int r = 0; r < o.cp; ++r) {
      RankShard& shard = shards[r];
      shard.q = slice_tokens(q, r, n);
      shard.k = slice_tokens(k, r, n);
      shard.v = slice_tokens(v, r, n);
      shard.dout = slice_tokens(dout, r, n);
      shard.segment_ids = slice_tokens(ids, r, n);
      shard.positions = slice_tokens(pos, r, n);
      shard.step_visible.resize(o.cp);
      for (int src = 0; src < o.cp; ++src)
        shard.step_visible[src] = analysis.step_pairs[r][src] > 0;
    }
  }
  clock.lap("shard");

  RunOptions rank_options = options;
  if (rank_options.backend_options.num_threads == 0) {
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    rank_options.backend_options.num_threads = std::max(1, cores / o.cp);
  }
  say(std::string("running ") + strategy_name(o.strategy) + " forward" +
      (options.backward ? " and backward" : "") + " on " + std::to_string(o.cp) + " ranks (" +
      report.backend + " backend)");
  std::vector<RankResult> results(o.cp);
  std::mutex progress_mutex;
  run_in_process(o.cp, [&](Communicator& comm) {
    results[comm.rank()] = run_rank(shards[comm.rank()], rank_options, o, comm);
    std::lock_guard<std::mutex> lock(progress_mutex);
    say("rank " + std::to_string(comm.rank()) + " done");
  });
  clock.lap("cp run");

  // Back to original order: place each rank's shard, then undo the reorder.
  const std::vector<int32_t> inverse = invert_index(index);
  auto unshard = [&](HostTensor RankResult::*field, const HostTensor& like) {
    HostTensor full(like.rows, batch.seq_len, like.token_bytes);
    for (int r = 0; r < o.cp; ++r) place_tokens(results[r].*field, r, full);
    return permute_tokens(full, inverse);
  };
  row.out = unshard(&RankResult::out, row.q);
  row.lse = unshard(&RankResult::lse, HostTensor(batch.batch * o.num_heads_q, 0, sizeof(float)));
  if (options.backward) {
    row.dq = unshard(&RankResult::dq, row.q);
    row.dk = unshard(&RankResult::dk, row.k);
    row.dv = unshard(&RankResult::dv, row.v);
  }
  for (int r = 0; r < o.cp; ++r) {
    results[r].report.visible_pairs = analysis.visible_pairs[r];
    report.ranks.push_back(results[r].report);
  }
  report.imbalance = analysis.imbalance;
  clock.lap("unshard");

  double work = 0.0;
  for (int64_t pairs : analysis.visible_pairs) work += double(pairs);
  work *= double(o.num_heads_q) * o.head_dim;
  report.verified = options.verify.value_or(work <= kAutoVerifyWorkLimit);
  if (!report.verified) {
    report.verify_note = options.verify.has_value()
                             ? "verification off (--no-verify)"
                             : "verification off by default for this size (the fp64 reference "
                               "would take long); pass --verify to force it";
  } else {
    report.errors = verify_run(batch, o, row, options.backward, progress);
    clock.lap("verify");
  }
  report.passed = std::all_of(report.errors.begin(), report.errors.end(),
                              [](const TensorError& e) { return e.passed; });
  return report;
}

}  // namespace ringpack
