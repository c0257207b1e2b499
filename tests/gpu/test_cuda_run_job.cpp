// The whole run on the CUDA backend: CP ranks as virtual ranks of one GPU (the in-process
// communicator through host staging), every strategy and reorder on adversarial layouts, O, LSE,
// dQ, dK, dV against the single-device fp64 reference.
#include <gtest/gtest.h>

#include <sstream>

#include "gpu_test_support.h"
#include "ringpack/job.h"

namespace ringpack::testing {
namespace {

class CudaRunJob : public GpuTest {};

std::string describe(const RunReport& report) {
  std::ostringstream out;
  for (const TensorError& e : report.errors) {
    out << e.name << ": rel " << e.rel_err << " (tol " << e.tolerance << ")"
        << (e.passed ? "" : " FAILED at " + e.worst) << "\n";
  }
  return out.str();
}

TEST_F(CudaRunJob, EveryStrategyAndReorderMatchesReferenceOnAdversarialLayouts) {
  const int seq_len = 192;  // not a multiple of the kernels' tiles per shard for cp = 3
  for (int cp : {1, 2, 3, 4}) {
    for (const auto& layout : adversarial_layouts(seq_len, cp)) {
      for (Strategy strategy : {Strategy::kRing, Strategy::kAllGather}) {
        for (ReorderSpec reorder :
             {ReorderSpec{ReorderKind::kContiguous}, ReorderSpec{ReorderKind::kDualChunkSwap},
              ReorderSpec{ReorderKind::kStriped, 1}}) {
          RunOptions options;
          options.batch.layout = layout.batch;
          options.batch.cp = cp;
          options.batch.strategy = strategy;
          options.batch.reorder = reorder;
          options.batch.num_heads_q = 4;
          options.batch.num_heads_kv = 1;
          options.batch.head_dim = 64;
          options.batch.dtype = DType::kBF16;
          options.batch.seed = seed_from_test_name() + cp;
          options.backend = BackendKind::kCuda;
          options.verify = true;
          const RunReport report = run_job(options);
          EXPECT_TRUE(report.passed)
              << layout.name << " cp=" << cp << " " << strategy_name(strategy) << " "
              << reorder_label(reorder) << "\n"
              << describe(report);
        }
      }
    }
  }
}

TEST_F(CudaRunJob, DefaultBatchPasses) {
  RunOptions options;  // the CLI's defaults: packed 4096-token row, cp 4, auto reorder, bf16
  options.backend = BackendKind::kCuda;
  options.verify = true;
  const RunReport report = run_job(options);
  EXPECT_TRUE(report.passed) << describe(report);
}

}  // namespace
}  // namespace ringpack::testing
