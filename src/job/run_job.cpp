// run_job: batch -> reorder -> shards -> CP forward/backward on `cp` ranks -> inverse reorder ->
// verification against the single-device fp64 reference (docs/design.md §3, §4, §7).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "job/rank_exchange.h"
#include "job/rank_runner.h"
#include "job/rank_world.h"
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

// Most CPU worker threads a rank may ask for (docs/design.md §5).
constexpr int kMaxThreads = 1024;

// What rank 0 of a multi-process run tells the others (one byte).
enum class Verdict : uint8_t { kFailed = 0, kPassed = 1, kNotVerified = 2 };

Verdict verdict_of(const RunReport& report) {
  if (!report.verified) return Verdict::kNotVerified;
  return report.passed ? Verdict::kPassed : Verdict::kFailed;
}

void validate_shapes(const BatchOptions& o) {
  RINGPACK_CHECK(o.num_heads_q >= 1 && o.num_heads_kv >= 1, "head counts must be positive (got ",
                 o.num_heads_q, " query heads, ", o.num_heads_kv, " kv heads)");
  RINGPACK_CHECK(o.num_heads_q % o.num_heads_kv == 0, "num_heads_q ", o.num_heads_q,
                 " is not a multiple of num_heads_kv ", o.num_heads_kv,
                 "; GQA needs each kv head shared by the same number of query heads");
  RINGPACK_CHECK(o.head_dim >= 1, "head_dim ", o.head_dim, " must be positive");
  RINGPACK_CHECK(o.cp >= 1, "cp ", o.cp, " must be at least 1");
}

void validate_threads(int threads) {
  RINGPACK_CHECK(threads >= 0 && threads <= kMaxThreads, "--threads ", threads,
                 " is out of range: pass 1 to ", kMaxThreads,
                 " worker threads per rank, or 0 for the cores / cp");
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
  validate_threads(options.backend_options.num_threads);
  {  // an unsupported forward or backward fails here, before any work or progress line
    auto probe = make_backend(options.backend, options.backend_options);
    probe->check_supported(o.dtype, o.head_dim, options.backward);
    report.backend = probe->name();
  }

  check_launch(options, o.cp);
  say("building the batch");
  const bool verify_requested = options.verify.value_or(false);
  const PackedBatch batch = build_resolved_batch(
      o,
      [&](const BatchOptions& sizes) {
        return run_bytes_needed(sizes, options.backward, verify_requested);
      },
      "a run");
  const std::vector<int> documents = count_documents(batch);
  report.documents = std::accumulate(documents.begin(), documents.end(), 0);
  report.padding_tokens = std::count(batch.segment_ids.begin(), batch.segment_ids.end(), 0);
  clock.lap("batch");

  say("planning the reorder");
  const PlanConfig config = plan_config(o, options.backend);
  const ReorderSpec spec = resolve_reorder(batch, o.reorder, config, &report.reorder_reason);
  const ReorderAnalysis analysis = analyse_reorder(batch, spec, config);
  o.reorder = spec;
  report.reorder = reorder_label(spec);
  if (report.reorder_reason.empty()) report.reorder_reason = "requested";
  clock.lap("plan");

  say("drawing random inputs");
  RowTensors row = draw_row_inputs(batch, o);
  say("sharding over " + std::to_string(o.cp) + " ranks (" + report.reorder + ")");
  const std::vector<int32_t> index = reorder_index(batch.seq_len, o.cp, spec);
  const std::vector<RankShard> shards = make_shards(batch, row, index, o.cp, analysis);
  clock.lap("shard");

  RunOptions rank_options = options;
  const CommKind comm_kind = resolve_comm(options);
  report.comm = comm_kind_name(comm_kind);
  const bool multi_process = is_multi_process(comm_kind);
  if (rank_options.backend_options.num_threads == 0) {
    // Each rank's share of the cores (multi-process ranks of one host share them too).
    const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
    rank_options.backend_options.num_threads = std::max(1, cores / o.cp);
  }
  report.threads = rank_options.backend_options.num_threads;
  report.backward = options.backward;
  report.deterministic = options.backend_options.deterministic;
  say(std::string("running ") + strategy_name(o.strategy) + " forward" +
      (options.backward ? " and backward" : "") + " on " + std::to_string(o.cp) + " ranks (" +
      report.backend + " backend, " + report.comm + " communicator)");
  const uint64_t fingerprint = batch_fingerprint(batch, o, options.backward);
  std::vector<RankResult> results(o.cp);
  std::mutex progress_mutex;
  std::optional<Verdict> shared_verdict;  // multi-process runs: rank 0's verdict, on every rank
  // Restores the rows from the ranks' results and compares them with the reference (rank 0 of a
  // multi-process run, or this process when it holds every rank); returns the verdict.
  const auto restore_and_verify = [&]() -> Verdict {
    clock.lap("cp run");
    // Back to original order: each rank's tokens copied straight to their original places.
    auto unshard = [&](HostTensor RankResult::*field) {
      std::vector<const HostTensor*> parts;
      for (const RankResult& result : results) parts.push_back(&(result.*field));
      return unshard_tokens(parts, index);
    };
    row.out = unshard(&RankResult::out);
    row.lse = unshard(&RankResult::lse);
    if (options.backward) {
      row.dq = unshard(&RankResult::dq);
      row.dk = unshard(&RankResult::dk);
      row.dv = unshard(&RankResult::dv);
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
    // cheap = false: a run keeps the CPU-sized default even where the GPU reference judges it.
    const VerifyChoice choice = choose_verification(options.verify, work, /*cheap=*/false);
    report.verified = choice.verify;
    report.verify_note = choice.note;
    if (report.verified) {
      const VerifyReference reference = verify_reference_for(options.backend);
      report.errors = verify_run(batch, o, row, options.backward, progress, reference);
      report.verify_note = std::string("reference: ") + verify_reference_name(reference);
      clock.lap(reference == VerifyReference::kGpu ? "verify (gpu fp64)" : "verify (cpu fp64)");
    }
    report.passed = report.verified && all_passed(report.errors);
    return verdict_of(report);
  };
  for_each_rank(rank_options, o.cp, [&](AttentionBackend& backend, Communicator& comm) {
    const int r = comm.rank();
    if (multi_process) check_same_batch(backend, comm, fingerprint);
    RankResult mine = run_rank(shards[r], o, options.backward, backend, comm);
    if (!multi_process) {
      results[r] = std::move(mine);
      std::lock_guard<std::mutex> lock(progress_mutex);
      say("rank " + std::to_string(r) + " done");
      return;
    }
    report.process_rank = r;
    if (r == 0) say("gathering the ranks' results");
    results = gather_results(backend, comm, mine);
    // Rank 0 verifies and sends its verdict, so that every process exits with the same status.
    const std::byte verdict{uint8_t(r == 0 ? restore_and_verify() : Verdict::kFailed)};
    shared_verdict = Verdict(all_gather_bytes(backend, comm, {verdict})[0][0]);
  });
  if (!multi_process) {
    restore_and_verify();
  } else if (report.process_rank != 0) {
    const Verdict verdict = shared_verdict.value_or(Verdict::kFailed);
    report.verified = verdict != Verdict::kNotVerified;
    report.passed = verdict == Verdict::kPassed;
    report.verify_note = report.verified ? "verified on rank 0" : "not verified on rank 0";
  }
  return report;
}

}  // namespace ringpack
