// `ringpack bench`: times a backend's forward (forward_direct: out in the dtype) and backward
// (compute_delta + backward) on the standard workloads of docs/design.md §8 through the job
// bench_kernels (ringpack/job.h), and prints one table with the peers measured by bench/peers.py
// on the same layouts (--peers). Timing: the backend's timeline (CUDA events on a GPU) around
// each repetition after warm-up; median and min/max over the repetitions. Each workload is then
// checked once against the fp64 reference, forward and backward (the run's verification). FLOPs
// count visible pairs only: forward 4 * head_dim * num_heads_q * pairs, backward 2.5x forward.
//
// Typical use (scripts/gpu_check.sh):  ringpack bench --layouts-only --layouts-out L.json;
//   python3 bench/peers.py --layouts L.json --json P.json;  ringpack bench --peers P.json
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "batch_options.h"
#include "bench_cp.h"
#include "commands.h"
#include "core/excerpt.h"
#include "core/pair_count.h"
#include "kernel_flags.h"
#include "output_file.h"
#include "ringpack/attention.h"
#include "ringpack/dtype.h"
#include "ringpack/error.h"
#include "ringpack/job.h"
#include "ringpack/packing.h"
#include "ringpack/version.h"

namespace ringpack::cli {
namespace {

using nlohmann::json;

constexpr double kBackwardFlopFactor = 2.5;  // docs/design.md §8
constexpr double kFlopsPerPairPerDim = 4.0;  // QK^T and PV: 2 multiply-adds per pair and dim

struct BenchCommand {
  std::vector<std::string> workloads = {"dense-16k", "packed-16k", "packed-64k"};
  int num_heads_q = 32;
  int num_heads_kv = 8;
  int head_dim = 128;
  std::string dtype = "bf16";
  int warmup = 5;
  int reps = 30;
  bool backward = true;
  bool layouts_only = false;
  std::string layouts_out;
  std::string peers_file;
  std::string json_file;
  KernelFlags kernels;
  bool deterministic = BackendOptions{}.deterministic;
  std::string backend = "cuda";
  bool verify_flag = true;                     // --verify / --no-verify
  const CLI::Option* verify_option = nullptr;  // unset: the job decides
  std::optional<bool> verify() const {
    return verify_option != nullptr && verify_option->count() > 0 ? std::optional<bool>(verify_flag)
                                                                  : std::nullopt;
  }
  // --cp N: the whole CP schedule over N ranks instead of the kernels alone (bench_cp.h).
  int cp = 0;
  std::string comm;  // empty: device (virtual ranks of one GPU)
  std::string strategy = "ring";
  std::string reorder = "auto";
};

struct Workload {
  std::string name;
  PackedBatch batch;
  int64_t pairs = 0;
  int documents = 0;
};

// "dense-16k": one document of 16384 tokens; "packed-64k": a row of 65536 tokens packed with
// realistic document lengths, seed 0, capped at S/4.
// Largest N of a workload name (N x 1024 tokens: 64M tokens, 512 MiB of ids and positions).
constexpr int kMaxWorkloadKiloTokens = 65536;
constexpr int kTokensPerK = 1024;

// The <N> of "<kind>-<N>k": a whole number from 1 to kMaxWorkloadKiloTokens.
int workload_kilo_tokens(const std::string& name, const std::string& digits) {
  const bool all_digits = !digits.empty() && digits.size() <= 9 &&
                          digits.find_first_not_of("0123456789") == std::string::npos;
  RINGPACK_CHECK(all_digits, "workload '", excerpt(name), "': '", excerpt(digits),
                 "' is not a whole number of thousands of tokens; use e.g. packed-16k");
  const int kilo = std::stoi(digits);
  RINGPACK_CHECK(kilo >= 1 && kilo <= kMaxWorkloadKiloTokens, "workload '", excerpt(name),
                 "': ", kilo, "k tokens is out of range; use 1k to ", kMaxWorkloadKiloTokens, "k");
  return kilo;
}

Workload make_workload(const std::string& name) {
  const size_t dash = name.find('-');
  RINGPACK_CHECK(dash != std::string::npos && name.size() > dash + 1 && name.back() == 'k',
                 "unknown workload '", excerpt(name),
                 "': use dense-<N>k or packed-<N>k, e.g. packed-16k");
  const std::string kind = name.substr(0, dash);
  const int seq_len =
      workload_kilo_tokens(name, name.substr(dash + 1, name.size() - dash - 2)) * kTokensPerK;
  Workload w;
  w.name = name;
  if (kind == "dense") {
    PackerOptions options;
    options.source = LengthSource::kFixed;
    options.fixed_length = seq_len;
    w.batch = pack_documents(1, seq_len, options);
  } else if (kind == "packed") {
    PackerOptions options;
    options.source = LengthSource::kRealistic;
    options.max_doc_length = seq_len / 4;
    options.seed = 0;
    w.batch = pack_documents(1, seq_len, options);
  } else {
    RINGPACK_FAIL("unknown workload kind '", excerpt(kind), "' in '", excerpt(name),
                  "': use dense or packed");
  }
  const std::vector<int> one_rank(seq_len, 0);
  w.pairs = count_step_pairs(w.batch, one_rank, 1, MaskSpec{})[0][0];
  w.documents = count_documents(w.batch)[0];
  return w;
}

using Timing = KernelTiming;

double tflops(double flops, double ms) {
  return ms > 0.0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
}

struct Result {
  std::string workload;
  std::string impl;
  std::string pass = "-";  // "yes" / "NO" / "-" (not checked)
  std::vector<TensorError> checks;
  Timing fwd;
  Timing bwd;
  bool has_bwd = false;
};

json layouts_json(const std::vector<Workload>& workloads, const BenchCommand& c) {
  json out;
  out["num_heads_q"] = c.num_heads_q;
  out["num_heads_kv"] = c.num_heads_kv;
  out["head_dim"] = c.head_dim;
  out["dtype"] = c.dtype;
  out["warmup"] = c.warmup;
  out["reps"] = c.reps;
  for (const Workload& w : workloads) {
    out["workloads"].push_back({{"name", w.name},
                                {"seq_len", w.batch.seq_len},
                                {"pairs", w.pairs},
                                {"documents", w.documents},
                                {"segment_ids", w.batch.segment_ids},
                                {"positions", w.batch.positions}});
  }
  return out;
}

Result bench_ours(const Workload& w, const BenchCommand& c, DType dtype, BackendKind kind,
                  const BackendOptions& options) {
  KernelBenchOptions bench;
  bench.batch.num_heads_q = c.num_heads_q;
  bench.batch.num_heads_kv = c.num_heads_kv;
  bench.batch.head_dim = c.head_dim;
  bench.batch.dtype = dtype;
  bench.warmup = c.warmup;
  bench.reps = c.reps;
  bench.backward = c.backward;
  bench.verify = c.verify();
  const std::unique_ptr<AttentionBackend> backend = make_backend(kind, options);
  const KernelBenchReport report = bench_kernels(w.batch, bench, *backend, kind);
  Result r;
  r.workload = w.name;
  r.impl = "ringpack";
  r.fwd = report.forward;
  r.bwd = report.backward;
  r.has_bwd = c.backward;
  r.pass = !report.verified ? "-" : report.passed ? "yes" : "NO";
  r.checks = report.errors;
  for (const TensorError& e : report.errors) {
    if (!e.passed) {
      std::cerr << "[ringpack] bench " << w.name << ": " << e.name << " rel err " << e.rel_err
                << " > " << e.tolerance << " (" << e.worst << ")" << std::endl;
    }
  }
  if (!report.verified)
    std::cerr << "[ringpack] bench " << w.name << ": " << report.verify_note << std::endl;
  return r;
}

std::vector<Result> load_peers(const std::string& path, std::string& peer_device) {
  std::ifstream in(path);
  RINGPACK_CHECK(in.good(), "cannot read peers file '", path, "'; run bench/peers.py first");
  const json j = json::parse(in);
  peer_device = j.value("device", "");
  std::vector<Result> results;
  for (const json& e : j.at("results")) {
    Result r;
    r.workload = e.at("workload").get<std::string>();
    r.impl = e.at("impl").get<std::string>();
    r.fwd = {e.at("fwd_ms").get<double>(), e.value("fwd_ms_min", 0.0), e.value("fwd_ms_max", 0.0)};
    if (e.contains("bwd_ms") && !e.at("bwd_ms").is_null()) {
      r.bwd = {e.at("bwd_ms").get<double>(), e.value("bwd_ms_min", 0.0),
               e.value("bwd_ms_max", 0.0)};
      r.has_bwd = true;
    }
    if (e.contains("error") && !e.at("error").is_null()) r.pass = "ERR";
    results.push_back(r);
  }
  return results;
}

std::string fixed(double x, int digits) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(digits) << x;
  return out.str();
}

// The kernel flags in effect, as the header and the JSON report them.
std::string kernel_choices(const BenchCommand& c) {
  return c.kernels.describe() + (c.deterministic ? " --deterministic" : "");
}

void run_cp(const BenchCommand& c, DType dtype, const std::vector<Workload>& workloads,
            const BackendOptions& kernels) {
  CpBenchSetup setup;
  setup.run.backend = parse_backend_kind(c.backend);
  setup.run.backend_options = kernels;
  setup.run.comm = c.comm.empty() ? CommKind::kDevice : parse_comm_kind(c.comm);
  BatchOptions& o = setup.run.batch;
  o.cp = c.cp;
  o.num_heads_q = c.num_heads_q;
  o.num_heads_kv = c.num_heads_kv;
  o.head_dim = c.head_dim;
  o.dtype = dtype;
  o.strategy = parse_strategy(c.strategy);
  o.reorder = parse_reorder_label(c.reorder);
  setup.reps = c.reps;
  setup.warmup = c.warmup;
  std::vector<std::pair<std::string, PackedBatch>> batches;
  for (const Workload& w : workloads) batches.emplace_back(w.name, w.batch);
  print_cp_bench(batches, setup, source_commit());
}

void run(const BenchCommand& c) {
  RINGPACK_CHECK(!c.layouts_only || !c.layouts_out.empty(),
                 "--layouts-only writes the layouts to --layouts-out, which is missing: pass "
                 "--layouts-out FILE");
  const BackendKind kind = parse_backend_kind(c.backend);
  const DType dtype = parse_dtype(c.dtype);  // a bad --dtype fails before workloads are built
  BackendOptions kernels;  // the CUDA kernel choices of the flags; other fields keep defaults
  c.kernels.apply(kernels);
  kernels.deterministic = c.deterministic;
  std::vector<Workload> workloads;
  for (const std::string& name : c.workloads) workloads.push_back(make_workload(name));
  if (c.cp > 0) return run_cp(c, dtype, workloads, kernels);
  if (!c.layouts_out.empty()) write_output(layouts_json(workloads, c).dump() + "\n", c.layouts_out);
  if (c.layouts_only) return;

  std::vector<Result> results;
  for (const Workload& w : workloads) {
    std::cerr << "[ringpack] bench " << w.name << " (" << w.documents << " documents, " << w.pairs
              << " visible pairs)" << std::endl;
    results.push_back(bench_ours(w, c, dtype, kind, kernels));
  }
  std::string peer_device;
  std::vector<Result> peers;
  if (!c.peers_file.empty()) peers = load_peers(c.peers_file, peer_device);
  std::vector<std::string> peer_names;
  for (const Result& p : peers)
    if (std::find(peer_names.begin(), peer_names.end(), p.impl) == peer_names.end())
      peer_names.push_back(p.impl);

  std::map<std::string, const Workload*> by_name;
  for (const Workload& w : workloads) by_name[w.name] = &w;
  const auto flops = [&](const std::string& name) {
    const Workload* w = by_name.at(name);
    return kFlopsPerPairPerDim * c.head_dim * c.num_heads_q * double(w->pairs);
  };

  // The table.
  std::ostringstream table;
  const std::string device = backend_device_name(kind, kernels);
  table << "# ringpack bench: " << c.backend << " backend on " << device << ", dtype " << c.dtype
        << ", batch 1, " << c.num_heads_q << " q heads, " << c.num_heads_kv
        << " kv heads, head_dim " << c.head_dim << ", causal document mask\n"
        << "# commit " << source_commit() << "; the backend's timeline, " << c.warmup
        << " warm-up + " << c.reps << " reps, median ms (min-max)\n"
        << "# kernels: " << kernel_choices(c) << "\n"
        << "# TFLOP/s = 4 * head_dim * num_heads_q * visible_pairs / time (fwd); bwd 2.5x fwd\n"
        << "# ours: fwd = forward_direct (cuda: tile pre-pass + kernel, direct epilogue); bwd = "
           "delta + backward;"
        << " pass = out, lse, dq, dk, dv vs the fp64 reference (the run's tolerances)\n";
  if (!peer_device.empty()) table << "# peers (bench/peers.py) on " << peer_device << "\n";
  for (const Workload& w : workloads)
    table << "# " << w.name << ": " << w.batch.seq_len << " tokens, " << w.documents
          << " documents, " << w.pairs << " visible pairs\n";
  table << std::left << std::setw(12) << "workload" << std::setw(10) << "impl" << std::setw(6)
        << "pass" << std::right << std::setw(27) << "fwd ms" << std::setw(9) << "fwd TF/s"
        << std::setw(27) << "bwd ms" << std::setw(9) << "bwd TF/s";
  for (const std::string& p : peer_names) table << std::setw(16) << ("vs " + p + " f/b");
  table << "\n";
  std::vector<Result> all = results;
  all.insert(all.end(), peers.begin(), peers.end());
  std::stable_sort(all.begin(), all.end(), [&](const Result& a, const Result& b) {
    const auto index = [&](const std::string& n) {
      return std::find(c.workloads.begin(), c.workloads.end(), n) - c.workloads.begin();
    };
    return index(a.workload) < index(b.workload);
  });
  json json_results = json::array();
  for (const Result& r : all) {
    if (!by_name.count(r.workload)) continue;
    const double f = flops(r.workload);
    const auto span = [&](const Timing& t) {
      return fixed(t.median_ms, 3) + " (" + fixed(t.min_ms, 3) + "-" + fixed(t.max_ms, 3) + ")";
    };
    table << std::left << std::setw(12) << r.workload << std::setw(10) << r.impl << std::setw(6)
          << r.pass << std::right << std::setw(27) << span(r.fwd) << std::setw(9)
          << fixed(tflops(f, r.fwd.median_ms), 1) << std::setw(27)
          << (r.has_bwd ? span(r.bwd) : "-") << std::setw(9)
          << (r.has_bwd ? fixed(tflops(kBackwardFlopFactor * f, r.bwd.median_ms), 1) : "-");
    json entry = {{"workload", r.workload},
                  {"impl", r.impl},
                  {"pass", r.pass},
                  {"fwd_ms", r.fwd.median_ms},
                  {"fwd_ms_min", r.fwd.min_ms},
                  {"fwd_ms_max", r.fwd.max_ms},
                  {"fwd_tflops", tflops(f, r.fwd.median_ms)}};
    for (const TensorError& e : r.checks) {
      entry["checks"].push_back({{"tensor", e.name},
                                 {"rel_err", e.rel_err},
                                 {"max_abs_err", e.max_abs_err},
                                 {"tolerance", e.tolerance},
                                 {"passed", e.passed}});
    }
    if (r.has_bwd) {
      entry["bwd_ms"] = r.bwd.median_ms;
      entry["bwd_ms_min"] = r.bwd.min_ms;
      entry["bwd_ms_max"] = r.bwd.max_ms;
      entry["bwd_tflops"] = tflops(kBackwardFlopFactor * f, r.bwd.median_ms);
    }
    for (const std::string& p : peer_names) {
      const auto peer = std::find_if(peers.begin(), peers.end(), [&](const Result& x) {
        return x.impl == p && x.workload == r.workload;
      });
      std::string cell = "-";
      if (r.impl == "ringpack" && peer != peers.end() && peer->fwd.median_ms > 0.0) {
        const double fwd_ratio = peer->fwd.median_ms / r.fwd.median_ms;
        cell = fixed(fwd_ratio, 2);
        entry["fwd_ratio_vs_" + p] = fwd_ratio;
        if (r.has_bwd && peer->has_bwd && r.bwd.median_ms > 0.0) {
          const double bwd_ratio = peer->bwd.median_ms / r.bwd.median_ms;
          cell += "/" + fixed(bwd_ratio, 2);
          entry["bwd_ratio_vs_" + p] = bwd_ratio;
        }
      }
      table << std::setw(16) << cell;
    }
    table << "\n";
    json_results.push_back(entry);
  }
  std::cout << table.str() << std::flush;
  if (!c.json_file.empty()) {
    json out = layouts_json({}, c);
    out.erase("workloads");
    out["device"] = device;
    out["backend"] = c.backend;
    out["commit"] = source_commit();
    out["kernels"] = kernel_choices(c);
    out["formula"] = "fwd TFLOP/s = 4*head_dim*num_heads_q*pairs/time; bwd = 2.5x";
    out["results"] = json_results;
    std::ofstream file(c.json_file);
    RINGPACK_CHECK(file.good(), "cannot write '", c.json_file, "'; check the directory");
    file << out.dump(2) << "\n";
  }
  for (const Result& r : results)
    if (r.pass == "NO") throw CLI::RuntimeError(kExitFail);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "bench",
      "time a backend's forward and backward on the standard workloads and check them against "
      "the fp64 reference (docs/design.md §8)");
  auto state = std::make_shared<BenchCommand>();
  command->formatter(std::make_shared<HelpFormatter>());
  command->add_option("--workloads", state->workloads, "dense-<N>k / packed-<N>k names")
      ->delimiter(',');
  command->add_option("--heads-q", state->num_heads_q, "query heads");
  command->add_option("--heads-kv", state->num_heads_kv, "key/value heads");
  command->add_option("--head-dim", state->head_dim, "head_dim (64, 128, 256)");
  command->add_option("--dtype", state->dtype, "bf16 or fp16 (fp32 on the cpu backends)");
  command->add_option("--backend", state->backend, "cuda (default), cpu or reference");
  state->verify_option = command->add_flag(
      "--verify,!--no-verify", state->verify_flag,
      "check out, lse, dq, dk and dv against the fp64 reference (default: on where the reference "
      "is fast: the GPU one, or the CPU one on small rows)");
  command->add_option("--warmup", state->warmup, "untimed calls before timing");
  command->add_option("--reps", state->reps, "timed repetitions (median reported)")
      ->check(CLI::Range(1, 100000));
  command->add_flag("!--no-backward", state->backward, "time the forward only");
  command->add_flag("--deterministic", state->deterministic,
                    "bit-reproducible accumulation (CUDA: the deterministic backward kernels)");
  command->add_flag("--layouts-only", state->layouts_only,
                    "write --layouts-out and exit (for bench/peers.py)");
  command->add_option("--layouts-out", state->layouts_out,
                      "write the workload layouts (segment ids, positions) as JSON");
  command->add_option("--peers", state->peers_file, "peer timings from bench/peers.py (JSON)");
  command->add_option("--json", state->json_file, "also write the results as JSON");
  const std::string cp_group = "CP (with --cp)";
  command
      ->add_option("--cp", state->cp,
                   "time the whole CP forward and backward over this many ranks, against one "
                   "rank on the whole row (0: the kernels alone)")
      ->group(cp_group);
  command->add_option("--comm", state->comm, "device (default), nccl")->group(cp_group);
  command->add_option("--strategy", state->strategy, "ring or all_gather")->group(cp_group);
  command->add_option("--reorder", state->reorder, "auto, contiguous, dual_chunk_swap, striped")
      ->group(cp_group);
  state->kernels.add_to(*command, "CUDA kernels", nullptr);
  command->callback([state] { run(*state); });
}

}  // namespace ringpack::cli
