// `ringpack bench --cp N`: the whole CP forward and backward on the standard workloads
// (bench_cp_job), one table row per workload and pass: time of the cp ranks, time of one rank
// on the whole row, TFLOP/s per device (visible pairs, docs/design.md §8), their ratio, and the
// exposed communication share.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ringpack/job.h"

namespace ringpack::cli {

struct CpBenchSetup {
  RunOptions run;  // batch.layout is replaced by each workload's
  int reps = 10;
  int warmup = 2;
};

// Prints the table on process rank 0 (multi-process runs: the other ranks print nothing).
void print_cp_bench(const std::vector<std::pair<std::string, PackedBatch>>& workloads,
                    const CpBenchSetup& setup, const std::string& commit);

}  // namespace ringpack::cli
