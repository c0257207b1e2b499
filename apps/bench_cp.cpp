// The CP benchmark table (bench_cp.h).
#include "bench_cp.h"

#include <cstdio>
#include <iostream>

namespace ringpack::cli {
namespace {

constexpr double kForwardFlopsPerPair = 4.0;  // x head_dim x heads_q: QK^T and PV
constexpr double kBackwardOverForward = 2.5;
constexpr double kTera = 1e12;
constexpr double kPercent = 100.0;
constexpr double kMsPerSecond = 1e3;

std::string row(const std::string& workload, const char* pass, double flops, double cp_seconds,
                double single_seconds, int devices, double exposed) {
  const double rate = flops / (cp_seconds * devices) / kTera;
  const double single_rate = flops / single_seconds / kTera;
  char line[256];
  std::snprintf(line, sizeof(line), "%-12s %-9s %10.3f %11.3f %12.1f %12.1f %7.3f %8.1f%%\n",
                workload.c_str(), pass, cp_seconds * kMsPerSecond, single_seconds * kMsPerSecond,
                rate, single_rate, rate / single_rate, exposed * kPercent);
  return line;
}

}  // namespace

void print_cp_bench(const std::vector<std::pair<std::string, PackedBatch>>& workloads,
                    const CpBenchSetup& setup, const std::string& commit) {
  std::string table;
  bool header = false;
  bool rank0 = true;
  for (const auto& [name, batch] : workloads) {
    CpBenchOptions options;
    options.run = setup.run;
    options.run.batch.layout = batch;
    options.reps = setup.reps;
    options.warmup = setup.warmup;
    const CpBenchReport r = bench_cp_job(
        options, [](const std::string& line) { std::cerr << "[ringpack] " << line << std::endl; });
    rank0 = r.process_rank == 0;
    const BatchOptions& o = r.options;
    if (!header) {
      char line[512];
      std::snprintf(line, sizeof(line),
                    "# CP bench: cp %d, %s communicator, %s backend, %s, %s, heads %d/%d, "
                    "head_dim %d, %d device(s), median of %d reps after %d warm-up, commit %s\n"
                    "# TFLOP/s per device = 4 x head_dim x heads_q x visible pairs (x2.5 "
                    "backward) / (time x devices); ratio = cp rate / one-rank rate on the same "
                    "row; exposed = share of the slowest rank's loop waiting for transfers\n",
                    o.cp, r.comm.c_str(), r.backend.c_str(), strategy_name(o.strategy),
                    dtype_name(o.dtype), o.num_heads_q, o.num_heads_kv, o.head_dim, r.devices,
                    setup.reps, setup.warmup, commit.c_str());
      table += line;
      std::snprintf(line, sizeof(line), "%-12s %-9s %10s %11s %12s %12s %7s %9s\n", "workload",
                    "pass", "cp ms", "1-rank ms", "TFLOP/s/dev", "1-rank TF/s", "ratio", "exposed");
      table += line;
      header = true;
    }
    const double forward_flops =
        kForwardFlopsPerPair * o.head_dim * o.num_heads_q * r.visible_pairs;
    table += row(name + " " + r.reorder, "forward", forward_flops, r.forward_seconds,
                 r.single_forward_seconds, r.devices, r.forward_exposed);
    table += row(name + " " + r.reorder, "backward", kBackwardOverForward * forward_flops,
                 r.backward_seconds, r.single_backward_seconds, r.devices, r.backward_exposed);
  }
  if (rank0) std::cout << table << std::flush;
}

}  // namespace ringpack::cli
