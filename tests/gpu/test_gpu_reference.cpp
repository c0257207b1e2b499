// GPU tests of the GPU reference (src/cuda/reference/reference_attention.h), judged by the CPU
// fp64 reference (src/cpu/reference_attention.h): both sum in fp64, so O, LSE, dQ, dK and dV
// agree to 1e-9 of the tensor's largest entry. The low-precision baselines (fp32 sums, P and dS
// rounded to the dtype) differ only in summation order, so each one's error against the fp64
// reference stays within the 2x of compare_tensor (src/core/compare.h) of the other's.
// Layouts: every adversarial layout (short documents, padding inside the row and at its end,
// an all-padding row, B = 3), random packed rows with B = 2 and lengths that are not multiples
// of the 8 rows of a block, documents split into several runs and positions that are not
// sorted (the walk falls back to the whole row / run), GQA 4/2 and 8/2, head_dim 48, 64, 128,
// 256, causal, non-causal, sliding windows, fp32, bf16 and fp16.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/compare.h"
#include "cpu/reference_attention.h"
#include "cuda/reference/reference_attention.h"
#include "gpu/gpu_test_support.h"
#include "ringpack/attention.h"
#include "ringpack/error.h"
#include "support/adversarial_layouts.h"

namespace ringpack::testing {
namespace {

struct Setup {
  DType dtype = DType::kF32;
  int head_dim = 64;
  int num_heads_q = 4;
  int num_heads_kv = 2;
  MaskSpec mask;
};

std::string describe(const Setup& s) {
  return std::string(dtype_name(s.dtype)) + " head_dim " + std::to_string(s.head_dim) + " heads " +
         std::to_string(s.num_heads_q) + "/" + std::to_string(s.num_heads_kv) +
         (s.mask.causal ? " causal" : " non-causal") + " window " + std::to_string(s.mask.window);
}

// Every entry within 1e-9 of the largest |expected| (at least 1); -inf (the lse of a row with
// no visible key) only where expected is -inf.
void expect_fp64_close(const std::string& what, const std::vector<double>& got,
                       const std::vector<double>& expected) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  double largest = 1.0;
  for (const double e : expected) {
    if (std::isfinite(e)) largest = std::max(largest, std::fabs(e));
  }
  const double tolerance = 1e-9 * largest;
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const bool ok = std::isfinite(expected[i])
                        ? std::isfinite(got[i]) && std::fabs(got[i] - expected[i]) <= tolerance
                        : got[i] == expected[i];
    if (!ok && reported++ < 5) {
      ADD_FAILURE() << what << " [" << i << "]: gpu " << got[i] << ", cpu " << expected[i]
                    << " (tolerance " << tolerance << ")";
    }
  }
}

// The GPU baseline judged against the CPU one through compare_tensor, both ways: each
// baseline's error against the fp64 reference is within 2x (+ the floors) of the other's.
void expect_same_baseline_error(const std::string& what, DType dtype,
                                const std::vector<double>& gpu_low,
                                const std::vector<double>& cpu_low,
                                const std::vector<double>& ref) {
  const std::vector<int64_t> shape{int64_t(ref.size())};
  const std::vector<std::string> axes{"element"};
  const TensorError gpu_vs_cpu = compare_tensor(what, gpu_low, ref, &cpu_low, dtype, shape, axes);
  EXPECT_TRUE(gpu_vs_cpu.passed) << what << ": gpu baseline rel_err " << gpu_vs_cpu.rel_err
                                 << ", tolerance " << gpu_vs_cpu.tolerance << ", masked "
                                 << gpu_vs_cpu.masked_mismatches << ", worst " << gpu_vs_cpu.worst;
  const TensorError cpu_vs_gpu = compare_tensor(what, cpu_low, ref, &gpu_low, dtype, shape, axes);
  EXPECT_TRUE(cpu_vs_gpu.passed) << what << ": cpu baseline rel_err " << cpu_vs_gpu.rel_err
                                 << ", tolerance " << cpu_vs_gpu.tolerance << ", masked "
                                 << cpu_vs_gpu.masked_mismatches << ", worst " << cpu_vs_gpu.worst;
}

// Random inputs on `batch`, the GPU reference and the CPU reference, forward and backward, and
// for bf16/fp16 the low-precision baselines.
void check_against_cpu(const std::string& name, const PackedBatch& batch, const Setup& s) {
  SCOPED_TRACE(name + ", " + describe(s));
  const uint64_t seed = seed_from_test_name() ^ std::hash<std::string>{}(name + describe(s));
  const size_t tokens = size_t(batch.batch) * batch.seq_len;
  const size_t q_count = tokens * s.num_heads_q * s.head_dim;
  const size_t kv_count = tokens * s.num_heads_kv * s.head_dim;
  const HostTensor q = random_tensor(q_count, s.dtype, seed + 1);
  const HostTensor k = random_tensor(kv_count, s.dtype, seed + 2);
  const HostTensor v = random_tensor(kv_count, s.dtype, seed + 3);
  const HostTensor dout = random_tensor(q_count, s.dtype, seed + 4);
  const std::vector<double> qd = as_doubles(q, s.dtype), kd = as_doubles(k, s.dtype),
                            vd = as_doubles(v, s.dtype), doutd = as_doubles(dout, s.dtype);

  const AttentionDims dims{batch.batch,   batch.seq_len,  batch.seq_len,
                           s.num_heads_q, s.num_heads_kv, s.head_dim};
  const double scale = resolve_scale(0.0f, s.head_dim);
  ReferenceProblem cpu;
  cpu.dims = dims;
  cpu.mask = s.mask;
  cpu.scale = scale;
  cpu.q = qd.data();
  cpu.k = kd.data();
  cpu.v = vd.data();
  cpu.segment_ids_q = cpu.segment_ids_k = batch.segment_ids.data();
  cpu.positions_q = cpu.positions_k = batch.positions.data();

  GpuReferenceProblem gpu;
  gpu.dims = dims;
  gpu.mask = s.mask;
  gpu.scale = scale;
  gpu.dtype = s.dtype;
  gpu.q = q.data();
  gpu.k = k.data();
  gpu.v = v.data();
  gpu.segment_ids = batch.segment_ids.data();
  gpu.positions = batch.positions.data();

  const ReferenceForward cpu_f = reference_forward(cpu);
  const ReferenceForward gpu_f = gpu_reference_forward(gpu);
  expect_fp64_close("out", gpu_f.out, cpu_f.out);
  expect_fp64_close("lse", gpu_f.lse, cpu_f.lse);
  const ReferenceGrads cpu_g = reference_backward(cpu, doutd.data(), cpu_f);
  const ReferenceGrads gpu_g = gpu_reference_backward(gpu, dout.data(), gpu_f);
  expect_fp64_close("dq", gpu_g.dq, cpu_g.dq);
  expect_fp64_close("dk", gpu_g.dk, cpu_g.dk);
  expect_fp64_close("dv", gpu_g.dv, cpu_g.dv);
  if (s.dtype == DType::kF32) return;

  const ReferenceForward cpu_low_f = lowprec_forward(cpu, s.dtype);
  const ReferenceForward gpu_low_f = gpu_lowprec_forward(gpu);
  expect_same_baseline_error("low out", s.dtype, gpu_low_f.out, cpu_low_f.out, cpu_f.out);
  expect_same_baseline_error("low lse", DType::kF32, gpu_low_f.lse, cpu_low_f.lse, cpu_f.lse);
  const ReferenceGrads cpu_low_g = lowprec_backward(cpu, doutd.data(), s.dtype);
  const ReferenceGrads gpu_low_g = gpu_lowprec_backward(gpu, dout.data(), gpu_low_f);
  expect_same_baseline_error("low dq", s.dtype, gpu_low_g.dq, cpu_low_g.dq, cpu_g.dq);
  expect_same_baseline_error("low dk", s.dtype, gpu_low_g.dk, cpu_low_g.dk, cpu_g.dk);
  expect_same_baseline_error("low dv", s.dtype, gpu_low_g.dv, cpu_low_g.dv, cpu_g.dv);
}

Setup make_setup(DType dtype, int head_dim, int hq, int hkv, bool causal, int64_t window) {
  Setup s;
  s.dtype = dtype;
  s.head_dim = head_dim;
  s.num_heads_q = hq;
  s.num_heads_kv = hkv;
  s.mask.causal = causal;
  s.mask.window = window;
  return s;
}

class GpuReference : public GpuTest {};

TEST_F(GpuReference, AdversarialLayoutsMatchCpuReference) {
  for (const NamedLayout& layout : adversarial_layouts(64, 4)) {
    check_against_cpu(layout.name, layout.batch, make_setup(DType::kF32, 64, 4, 2, true, -1));
    check_against_cpu(layout.name, layout.batch, make_setup(DType::kBF16, 128, 4, 2, true, -1));
  }
}

TEST_F(GpuReference, HeadDimsMatchCpuReference) {
  const PackedBatch batch = random_packed_batch(2, 83, seed_from_test_name());
  for (const int head_dim : {48, 64, 128, 256}) {
    check_against_cpu("random_packed", batch, make_setup(DType::kF32, head_dim, 4, 2, true, -1));
  }
  check_against_cpu("random_packed", batch, make_setup(DType::kBF16, 256, 8, 2, true, -1));
  check_against_cpu("random_packed", batch, make_setup(DType::kF16, 64, 4, 4, true, -1));
}

TEST_F(GpuReference, MasksMatchCpuReference) {
  const PackedBatch batch = random_packed_batch(2, 101, seed_from_test_name());
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    check_against_cpu("random_packed", batch, make_setup(dtype, 64, 4, 2, false, -1));
    check_against_cpu("random_packed", batch, make_setup(dtype, 64, 4, 2, true, 5));
    check_against_cpu("random_packed", batch, make_setup(dtype, 128, 4, 2, false, 7));
    check_against_cpu("random_packed", batch, make_setup(dtype, 64, 4, 2, true, 0));
  }
  check_against_cpu("random_packed", batch, make_setup(DType::kF16, 128, 4, 2, false, 3));
}

// A document split into several runs of the row (its queries walk the whole row), positions
// that run backwards inside a document (the whole run), and duplicate positions.
TEST_F(GpuReference, NonContiguousLayoutsMatchCpuReference) {
  PackedBatch batch;
  batch.batch = 2;
  batch.seq_len = 37;
  batch.segment_ids.assign(size_t(2) * 37, 0);
  batch.positions.assign(size_t(2) * 37, 0);
  // Row 0: doc 1 in two runs around doc 2, padding inside, doc 3, tail padding.
  const std::vector<int32_t> seg0 = {1, 1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 0, 0, 3, 3, 3, 3, 3,
                                     3, 3, 3, 3, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  // Row 1: positions backwards in doc 4, duplicates in doc 5, then doc 6 in order.
  const std::vector<int32_t> seg1 = {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6,
                                     6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 0, 0, 0, 0};
  const std::vector<int32_t> pos1 = {7, 6, 5, 4, 3, 2, 1, 0, 0,  0,  1,  1,  2,  2,  3, 3, 4, 0, 1,
                                     2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 0, 0, 0};
  std::vector<int32_t> next_position(8, 0);
  for (int t = 0; t < 37; ++t) {
    batch.segment_ids[t] = seg0[t];
    batch.positions[t] = seg0[t] == 0 ? 0 : next_position[seg0[t]]++;
    batch.segment_ids[37 + t] = seg1[t];
    batch.positions[37 + t] = pos1[t];
  }
  for (const bool causal : {true, false}) {
    for (const int64_t window : {int64_t(-1), int64_t(2)}) {
      check_against_cpu("non_contiguous", batch, make_setup(DType::kF32, 64, 4, 2, causal, window));
      check_against_cpu("non_contiguous", batch,
                        make_setup(DType::kBF16, 128, 4, 2, causal, window));
    }
  }
}

TEST_F(GpuReference, LongDocumentsMatchCpuReference) {
  const PackedBatch batch = batch_from_lengths({{150, 0, 0, 60, 1, 1, 27}, {240}}, 245);
  check_against_cpu("long_documents", batch, make_setup(DType::kF32, 128, 8, 2, true, -1));
  check_against_cpu("long_documents", batch, make_setup(DType::kBF16, 64, 4, 2, true, 33));
}

TEST_F(GpuReference, RejectsWhatItCannotCompute) {
  GpuReferenceProblem problem;
  problem.dims = {1, 8, 8, 2, 2, 320};
  EXPECT_THROW(gpu_reference_forward(problem), Error);
  problem.dims = {1, 8, 4, 2, 2, 64};
  EXPECT_THROW(gpu_reference_forward(problem), Error);
}

}  // namespace
}  // namespace ringpack::testing
