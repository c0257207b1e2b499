// GPU tests of the CUDA backward (src/cuda/backward_*): run_delta and run_backward against the
// fp64 reference (src/cpu/reference_attention.h), with errors within 2x of the reference's own
// low-precision error (src/core/compare.h). A row is reordered, cut into cp shards, and the
// backward runs as cp x cp steps (queries of shard r against keys of shard s), each adding into
// fp32 accumulators that start at random nonzero values; the summed contributions must equal the
// whole-row gradients. Covers every adversarial layout, striped and dual_chunk_swap orders,
// bf16/fp16, head_dim 64/128/256, GQA 1/4/8, B > 1, lengths that are not multiples of the tiles,
// masks, and the deterministic mode (bit-identical repeats).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/compare.h"
#include "cpu/reference_attention.h"
#include "cuda/backward/api.h"
#include "gpu/gpu_test_support.h"
#include "ringpack/attention.h"
#include "ringpack/error.h"
#include "ringpack/packing.h"
#include "ringpack/reorder.h"
#include "support/adversarial_layouts.h"

namespace ringpack::testing {
namespace {

struct BackwardSetup {
  DType dtype = DType::kBF16;
  int head_dim = 64;
  int num_heads_q = 8;
  int num_heads_kv = 2;
  MaskSpec mask;
  ReorderSpec reorder;
  int cp = 1;
  cuda::KernelOptions kernels;  // the main loop, the gradient adds and the deterministic mode
};

std::string describe(const BackwardSetup& s) {
  return std::string(dtype_name(s.dtype)) + " head_dim " + std::to_string(s.head_dim) + " heads " +
         std::to_string(s.num_heads_q) + "/" + std::to_string(s.num_heads_kv) +
         (s.mask.causal ? " causal" : " non-causal") + " window " + std::to_string(s.mask.window) +
         " " + reorder_label(s.reorder) + " cp " + std::to_string(s.cp) + " backward_loop " +
         main_loop_name(s.kernels.backward_loop) + " grad_add " +
         gradient_add_name(s.kernels.backward_grad_add) + " schedule " +
         kernel_schedule_name(s.kernels.backward_schedule) + " sm_margin " +
         std::to_string(s.kernels.sm_margin) + (s.kernels.deterministic ? " deterministic" : "");
}

// Tokens [begin, begin + count) of every row of a [batch, seq_len, width] tensor of `elem`
// bytes per entry, as a contiguous [batch, count, width] tensor.
std::vector<uint8_t> slice_tokens(const void* data, int batch, int seq_len, size_t token_bytes,
                                  int begin, int count) {
  std::vector<uint8_t> out(size_t(batch) * count * token_bytes);
  const auto* src = static_cast<const uint8_t*>(data);
  for (int b = 0; b < batch; ++b) {
    std::memcpy(out.data() + size_t(b) * count * token_bytes,
                src + (size_t(b) * seq_len + begin) * token_bytes, size_t(count) * token_bytes);
  }
  return out;
}

// [batch, heads, seq_len] -> tokens [begin, begin + count) as [batch, heads, count].
std::vector<float> slice_rows(const std::vector<float>& data, int batch, int heads, int seq_len,
                              int begin, int count) {
  std::vector<float> out(size_t(batch) * heads * count);
  for (int bh = 0; bh < batch * heads; ++bh) {
    for (int t = 0; t < count; ++t) {
      out[size_t(bh) * count + t] = data[size_t(bh) * seq_len + begin + t];
    }
  }
  return out;
}

std::vector<double> to_doubles(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// One whole-row problem in reordered token order, with everything the backward reads.
struct RowProblem {
  PackedBatch batch;  // reordered ids and positions
  AttentionDims dims;
  HostTensor q, k, v, dout, out;
  std::vector<float> lse;  // [b, hq, s], fp32 of the fp64 forward
  ReferenceGrads expected;
  ReferenceGrads baseline;
};

RowProblem make_problem(const PackedBatch& layout, const BackwardSetup& s, uint64_t seed) {
  RowProblem p;
  const int seq_len = layout.seq_len;
  const std::vector<int32_t> index = reorder_index(seq_len, s.cp, s.reorder);
  p.batch = layout;
  for (int b = 0; b < layout.batch; ++b) {
    for (int i = 0; i < seq_len; ++i) {
      p.batch.segment_ids[size_t(b) * seq_len + i] = layout.segment_id(b, index[i]);
      p.batch.positions[size_t(b) * seq_len + i] = layout.position(b, index[i]);
    }
  }
  p.dims = AttentionDims{layout.batch, seq_len, seq_len, s.num_heads_q, s.num_heads_kv, s.head_dim};
  const size_t count_q = size_t(layout.batch) * seq_len * s.num_heads_q * s.head_dim;
  const size_t count_k = size_t(layout.batch) * seq_len * s.num_heads_kv * s.head_dim;
  p.q = random_tensor(count_q, s.dtype, seed + 1);
  p.k = random_tensor(count_k, s.dtype, seed + 2);
  p.v = random_tensor(count_k, s.dtype, seed + 3);
  p.dout = random_tensor(count_q, s.dtype, seed + 4);

  const std::vector<double> q = as_doubles(p.q, s.dtype);
  const std::vector<double> k = as_doubles(p.k, s.dtype);
  const std::vector<double> v = as_doubles(p.v, s.dtype);
  const std::vector<double> dout = as_doubles(p.dout, s.dtype);
  ReferenceProblem problem;
  problem.dims = p.dims;
  problem.mask = s.mask;
  problem.scale = resolve_scale(0.0f, s.head_dim);
  problem.q = q.data();
  problem.k = k.data();
  problem.v = v.data();
  problem.segment_ids_q = problem.segment_ids_k = p.batch.segment_ids.data();
  problem.positions_q = problem.positions_k = p.batch.positions.data();
  const ReferenceForward forward = reference_forward(problem);
  p.out = make_host_tensor(std::vector<float>(forward.out.begin(), forward.out.end()), s.dtype);
  p.lse.assign(forward.lse.begin(), forward.lse.end());
  p.expected = reference_backward(problem, dout.data(), forward);
  p.baseline = lowprec_backward(problem, dout.data(), s.dtype);
  return p;
}

// Final accumulator values of a run, whole rows in reordered token order, and the values the
// accumulators started from.
struct CudaGrads {
  std::vector<float> dq, dk, dv;
  std::vector<float> dq0, dk0, dv0;
};

// The backward as cp x cp steps over the shards of the reordered rows. The accumulators start at
// zero, or at random values when `nonzero_start` (to check += semantics).
CudaGrads run_cuda_steps(const RowProblem& p, const BackwardSetup& s, uint64_t seed,
                         bool nonzero_start = false) {
  const AttentionDims& d = p.dims;
  const int shard = d.seqlen_q / s.cp;
  const size_t elem = dtype_size(s.dtype);
  const size_t token_q = size_t(d.num_heads_q) * d.head_dim;
  const size_t token_k = size_t(d.num_heads_kv) * d.head_dim;
  CudaGrads grads;
  for (auto* whole : {&grads.dq, &grads.dq0})
    whole->assign(size_t(d.batch) * d.seqlen_q * token_q, 0.0f);
  for (auto* whole : {&grads.dk, &grads.dv, &grads.dk0, &grads.dv0}) {
    whole->assign(size_t(d.batch) * d.seqlen_k * token_k, 0.0f);
  }

  struct Shard {
    DeviceBuffer q, k, v, dout, out, lse, delta, ids, pos, dq, dk, dv;
    std::vector<float> dq0, dk0, dv0;  // initial accumulator values
  };
  auto initial = [&](size_t count, uint64_t stream_seed) {
    return nonzero_start ? random_uniform(count, stream_seed) : std::vector<float>(count, 0.0f);
  };
  std::vector<Shard> shards(s.cp);
  AttentionDims shard_dims = d;
  shard_dims.seqlen_q = shard_dims.seqlen_k = shard;
  for (int r = 0; r < s.cp; ++r) {
    Shard& sh = shards[r];
    const int begin = r * shard;
    sh.q = to_device(
        slice_tokens(p.q.bytes.data(), d.batch, d.seqlen_q, token_q * elem, begin, shard));
    sh.dout = to_device(
        slice_tokens(p.dout.bytes.data(), d.batch, d.seqlen_q, token_q * elem, begin, shard));
    sh.out = to_device(
        slice_tokens(p.out.bytes.data(), d.batch, d.seqlen_q, token_q * elem, begin, shard));
    sh.k = to_device(
        slice_tokens(p.k.bytes.data(), d.batch, d.seqlen_k, token_k * elem, begin, shard));
    sh.v = to_device(
        slice_tokens(p.v.bytes.data(), d.batch, d.seqlen_k, token_k * elem, begin, shard));
    sh.ids = to_device(slice_tokens(p.batch.segment_ids.data(), d.batch, d.seqlen_q,
                                    sizeof(int32_t), begin, shard));
    sh.pos = to_device(
        slice_tokens(p.batch.positions.data(), d.batch, d.seqlen_q, sizeof(int32_t), begin, shard));
    sh.lse = to_device(slice_rows(p.lse, d.batch, d.num_heads_q, d.seqlen_q, begin, shard));
    sh.delta = poisoned_buffer(size_t(d.batch) * d.num_heads_q * shard, DType::kF32);
    sh.dq0 = initial(size_t(d.batch) * shard * token_q, seed + 10 + 3 * r);
    sh.dk0 = initial(size_t(d.batch) * shard * token_k, seed + 11 + 3 * r);
    sh.dv0 = initial(size_t(d.batch) * shard * token_k, seed + 12 + 3 * r);
    sh.dq = to_device(sh.dq0);
    sh.dk = to_device(sh.dk0);
    sh.dv = to_device(sh.dv0);
    cuda::run_delta(sh.dout.data(), sh.out.data(), s.dtype, shard_dims, sh.delta.as<float>(),
                    nullptr);
  }
  for (int r = 0; r < s.cp; ++r) {
    for (int t = 0; t < s.cp; ++t) {
      AttentionStep step;
      step.dims = shard_dims;
      step.dtype = s.dtype;
      step.mask = s.mask;
      step.q = shards[r].q.data();
      step.k = shards[t].k.data();
      step.v = shards[t].v.data();
      step.segment_ids_q = shards[r].ids.as<int32_t>();
      step.positions_q = shards[r].pos.as<int32_t>();
      step.segment_ids_k = shards[t].ids.as<int32_t>();
      step.positions_k = shards[t].pos.as<int32_t>();
      const BackwardInputs in{shards[r].dout.data(), shards[r].lse.as<float>(),
                              shards[r].delta.as<float>()};
      const BackwardAccumulators acc{shards[r].dq.as<float>(), shards[t].dk.as<float>(),
                                     shards[t].dv.as<float>()};
      cuda::run_backward(step, in, acc, s.kernels, nullptr);
    }
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // Shard values [batch, shard, token] into whole rows [batch, seq_len, token].
  auto scatter = [&](const std::vector<float>& part, size_t token, int begin,
                     std::vector<float>& whole) {
    for (int b = 0; b < d.batch; ++b) {
      std::copy_n(part.begin() + size_t(b) * shard * token, size_t(shard) * token,
                  whole.begin() + (size_t(b) * d.seqlen_q + begin) * token);
    }
  };
  for (int r = 0; r < s.cp; ++r) {
    const Shard& sh = shards[r];
    scatter(to_host<float>(sh.dq, sh.dq0.size()), token_q, r * shard, grads.dq);
    scatter(to_host<float>(sh.dk, sh.dk0.size()), token_k, r * shard, grads.dk);
    scatter(to_host<float>(sh.dv, sh.dv0.size()), token_k, r * shard, grads.dv);
    scatter(sh.dq0, token_q, r * shard, grads.dq0);
    scatter(sh.dk0, token_k, r * shard, grads.dk0);
    scatter(sh.dv0, token_k, r * shard, grads.dv0);
  }
  return grads;
}

// Per-element bound where the reference is identically zero (the same absolute floor as
// compare.cpp's table).
constexpr double kZeroReferenceMaxAbs = 1e-5;

void expect_close(const std::string& name, const std::vector<float>& got_values,
                  const std::vector<double>& ref, const std::vector<double>& baseline, DType dtype,
                  std::vector<int64_t> shape, const std::string& what) {
  const TensorError e =
      compare_tensor(name, to_doubles(got_values), ref, &baseline, dtype, shape, bshd_axis_names());
  // A gradient that is exactly zero (single-token documents, window 0: O = V, so
  // dP - delta = 0 and dS = 0) is rounding noise of two fp32 sums in any implementation whose
  // dP and delta do not share one summation order; rel_err then degenerates to ||got||_2, which
  // grows with the element count. There the per-element floor is the check.
  const bool zero_reference =
      std::all_of(ref.begin(), ref.end(), [](double x) { return x == 0.0; });
  const bool passed =
      zero_reference ? e.masked_mismatches == 0 && e.max_abs_err <= kZeroReferenceMaxAbs : e.passed;
  EXPECT_TRUE(passed) << what << ": " << name << " rel_err " << e.rel_err << " (baseline "
                      << e.baseline_rel_err << ", tolerance " << e.tolerance << ") max_abs "
                      << e.max_abs_err << " mismatches " << e.masked_mismatches << "; worst "
                      << e.worst;
}

// Runs one case end to end and checks dQ, dK, dV.
void check_backward(const PackedBatch& layout, const BackwardSetup& s, uint64_t seed,
                    const std::string& what) {
  const RowProblem p = make_problem(layout, s, seed);
  const CudaGrads got = run_cuda_steps(p, s, seed);
  const AttentionDims& d = p.dims;
  const std::string label = what + " [" + describe(s) + "]";
  expect_close("dq", got.dq, p.expected.dq, p.baseline.dq, s.dtype,
               {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim}, label);
  expect_close("dk", got.dk, p.expected.dk, p.baseline.dk, s.dtype,
               {d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim}, label);
  expect_close("dv", got.dv, p.expected.dv, p.baseline.dv, s.dtype,
               {d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim}, label);
}

class CudaBackward : public GpuTest {};

TEST_F(CudaBackward, AddsOntoNonzeroAccumulators) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch batch = random_packed_batch(1, 190, seed);
  for (bool deterministic : {true, false}) {
    BackwardSetup s;
    s.kernels.deterministic = deterministic;
    const RowProblem p = make_problem(batch, s, seed);
    const CudaGrads from_zero = run_cuda_steps(p, s, seed);
    const CudaGrads from_values = run_cuda_steps(p, s, seed, true);
    // Deterministic mode adds each accumulator once per step, rounding the product before the
    // add: one fp32 rounding of initial + contribution, so the results match bit for bit. The
    // atomic mode adds one partial sum per key tile (dQ) or per query head (dK, dV) in any
    // order: fp32 rounding of each add.
    auto check = [&](const char* name, const std::vector<float>& got,
                     const std::vector<float>& start, const std::vector<float>& contribution) {
      for (size_t i = 0; i < got.size(); ++i) {
        const float expected = start[i] + contribution[i];
        const float slack = deterministic ? 0.0f : 1e-6f * (std::fabs(expected) + 1.0f);
        ASSERT_NEAR(got[i], expected, slack)
            << name << " " << i << (deterministic ? " deterministic" : " atomic");
      }
    };
    check("dq", from_values.dq, from_values.dq0, from_zero.dq);
    check("dk", from_values.dk, from_values.dk0, from_zero.dk);
    check("dv", from_values.dv, from_values.dv0, from_zero.dv);
  }
}

TEST_F(CudaBackward, DeltaMatchesRowSumOfDoutTimesOut) {
  const uint64_t seed = seed_from_test_name();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int head_dim : {64, 128, 256}) {
      const AttentionDims dims{2, 37, 37, 3, 1, head_dim};
      const size_t count = size_t(dims.batch) * dims.seqlen_q * dims.num_heads_q * head_dim;
      const HostTensor dout = random_tensor(count, dtype, seed + 1);
      const HostTensor out = random_tensor(count, dtype, seed + 2);
      const std::vector<double> dout_values = as_doubles(dout, dtype);
      const std::vector<double> out_values = as_doubles(out, dtype);
      const DeviceBuffer dout_d = to_device(dout);
      const DeviceBuffer out_d = to_device(out);
      const size_t rows = size_t(dims.batch) * dims.num_heads_q * dims.seqlen_q;
      DeviceBuffer delta = poisoned_buffer(rows, DType::kF32);
      cuda::run_delta(dout_d.data(), out_d.data(), dtype, dims, delta.as<float>(), nullptr);
      const std::vector<float> got = to_host<float>(delta, rows);
      for (int b = 0; b < dims.batch; ++b) {
        for (int h = 0; h < dims.num_heads_q; ++h) {
          for (int t = 0; t < dims.seqlen_q; ++t) {
            double sum = 0.0;
            double magnitude = 0.0;
            for (int i = 0; i < head_dim; ++i) {
              const size_t at =
                  ((size_t(b) * dims.seqlen_q + t) * dims.num_heads_q + h) * head_dim + i;
              sum += dout_values[at] * out_values[at];
              magnitude += std::fabs(dout_values[at] * out_values[at]);
            }
            const float value = got[(size_t(b) * dims.num_heads_q + h) * dims.seqlen_q + t];
            ASSERT_NEAR(value, sum, 1e-6 * magnitude + 1e-7)
                << dtype_name(dtype) << " head_dim " << head_dim << " row " << b << " head " << h
                << " token " << t;
          }
        }
      }
    }
  }
}

TEST_F(CudaBackward, AdversarialLayoutsDualChunkSwapCp2) {
  const uint64_t seed = seed_from_test_name();
  constexpr int kSeqLen = 196;  // not a multiple of any tile
  constexpr int kCp = 2;
  for (int head_dim : {64, 128, 256}) {
    BackwardSetup s;
    s.head_dim = head_dim;
    s.cp = kCp;
    s.reorder = ReorderSpec{ReorderKind::kDualChunkSwap, 1};
    for (const NamedLayout& layout : adversarial_layouts(kSeqLen, kCp)) {
      check_backward(layout.batch, s, seed, layout.name);
    }
  }
}

TEST_F(CudaBackward, AdversarialLayoutsStripedCp4Fp16) {
  const uint64_t seed = seed_from_test_name();
  constexpr int kSeqLen = 200;
  constexpr int kCp = 4;
  BackwardSetup s;
  s.dtype = DType::kF16;
  s.head_dim = 128;
  s.num_heads_q = 4;
  s.num_heads_kv = 4;
  s.cp = kCp;
  s.reorder = ReorderSpec{ReorderKind::kStriped, 1};
  for (const NamedLayout& layout : adversarial_layouts(kSeqLen, kCp)) {
    check_backward(layout.batch, s, seed, layout.name);
  }
}

TEST_F(CudaBackward, DtypesHeadDimsAndGqaRatiosOnOddLengths) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch batch = random_packed_batch(2, 257, seed);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int head_dim : {64, 128, 256}) {
      for (int ratio : {1, 4, 8}) {
        BackwardSetup s;
        s.dtype = dtype;
        s.head_dim = head_dim;
        s.num_heads_q = 8;
        s.num_heads_kv = 8 / ratio;
        check_backward(batch, s, seed, "random_packed_batch");
      }
    }
  }
}

TEST_F(CudaBackward, StripedStripeSizesAndCp3) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch batch = random_packed_batch(2, 384, seed);
  for (const ReorderSpec reorder :
       {ReorderSpec{ReorderKind::kStriped, 1}, ReorderSpec{ReorderKind::kStriped, 16},
        ReorderSpec{ReorderKind::kDualChunkSwap, 1}, ReorderSpec{ReorderKind::kContiguous, 1}}) {
    BackwardSetup s;
    s.cp = 3;
    s.reorder = reorder;
    check_backward(batch, s, seed, "random_packed_batch");
  }
}

TEST_F(CudaBackward, NonCausalAndSlidingWindowMasks) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch batch = random_packed_batch(2, 300, seed);
  for (const MaskSpec mask :
       {MaskSpec{false, -1}, MaskSpec{true, 17}, MaskSpec{false, 40}, MaskSpec{true, 0}}) {
    for (int head_dim : {64, 128, 256}) {
      BackwardSetup s;
      s.head_dim = head_dim;
      s.mask = mask;
      s.cp = 2;
      s.reorder = ReorderSpec{ReorderKind::kStriped, 1};
      check_backward(batch, s, seed, "random_packed_batch");
    }
  }
}

// The adversarial layouts of 196 tokens as cp 2 shards (dual chunk swap), with `kernels`.
void check_adversarial_shards(int head_dim, uint64_t seed, const cuda::KernelOptions& kernels,
                              const std::string& label = "") {
  for (const NamedLayout& layout : adversarial_layouts(196, 2)) {
    BackwardSetup s;
    s.head_dim = head_dim;
    s.cp = 2;
    s.reorder = ReorderSpec{ReorderKind::kDualChunkSwap, 1};
    s.kernels = kernels;
    check_backward(layout.batch, s, seed, layout.name + label);
  }
}

// Two rows of documents longer than many tiles, GQA 4:1.
void check_long_documents(int head_dim, uint64_t seed, const cuda::KernelOptions& kernels = {}) {
  const PackedBatch batch = batch_from_lengths({{700, 1, 300}, {1001}}, 1001);
  BackwardSetup s;
  s.head_dim = head_dim;
  s.num_heads_q = 4;
  s.num_heads_kv = 1;
  s.kernels = kernels;
  check_backward(batch, s, seed, "long_documents");
}

TEST_F(CudaBackward, LongDocumentAcrossManyTiles) {
  const uint64_t seed = seed_from_test_name();
  for (int head_dim : {64, 128, 256}) check_long_documents(head_dim, seed);
}

// The portable mma.sync dK/dV kernel with atomic dQ, which sm_90 skips for every head dim in
// favour of the wgmma kernel: forced so both stay tested on a Hopper machine.
TEST_F(CudaBackward, MmaSyncLoopMatchesReference) {
  const uint64_t seed = seed_from_test_name();
  cuda::KernelOptions mma_sync;
  mma_sync.backward_loop = MainLoop::kMmaSync;
  for (int head_dim : {64, 128, 256}) {
    check_long_documents(head_dim, seed, mma_sync);
    check_adversarial_shards(head_dim, seed, mma_sync);
  }
}

// The Hopper backward adds its gradients by tensor reductions of staged tiles by default; the
// float2-atomic path (accumulators TMA cannot describe, or chosen for A/B benchmarks) must agree
// with the reference too, and so must other head splits than one CTA per query head.
TEST_F(CudaBackward, AtomicGradientAddsMatchReference) {
  const uint64_t seed = seed_from_test_name();
  cuda::KernelOptions atomics;
  atomics.backward_grad_add = GradientAdd::kAtomics;
  for (int head_dim : {64, 128, 256}) check_long_documents(head_dim, seed, atomics);
}

TEST_F(CudaBackward, HeadSplitsMatchReference) {
  const uint64_t seed = seed_from_test_name();
  for (const MainLoop loop : {MainLoop::kAuto, MainLoop::kMmaSync}) {
    for (const int splits : {1, 2}) {  // GQA 4:1 in check_long_documents
      cuda::KernelOptions kernels;
      kernels.backward_loop = loop;
      kernels.backward_head_splits = splits;
      for (int head_dim : {64, 128, 256}) check_long_documents(head_dim, seed, kernels);
    }
  }
}

// The Hopper backward's persistent schedule (KernelOptions::backward_schedule) on one CTA
// (sm_margin = SMs - 1): a single CTA walks every (key tile, kv head) item, empty ones among them
// (the padded tails), so the work ring, the hand-over of K, V and the Q/dO stages between items
// (after the epilogue has staged dK and dV there) and the Q/dO phases that run on across items
// all turn over many times: every head dim, tile adds and atomics. Small enough for
// compute-sanitizer (scripts/gpu_check.sh).
void check_persistent_on_one_sm(int head_dim, GradientAdd add, int splits, uint64_t seed) {
  const int sms = device_sm_count();
  BackwardSetup s;
  s.head_dim = head_dim;
  s.num_heads_q = 4;
  s.num_heads_kv = 1;
  s.kernels.backward_schedule = KernelSchedule::kPersistent;
  s.kernels.sm_margin = sms - 1;
  s.kernels.backward_grad_add = add;
  s.kernels.backward_head_splits = splits;
  check_backward(short_documents_then_padding(), s, seed + head_dim,
                 "short_documents_then_padding on one CTA, head splits " + std::to_string(splits));
}

TEST_F(CudaBackward, PersistentScheduleOnOneSmMatchesReference) {
  const uint64_t seed = seed_from_test_name();
  for (int head_dim : {64, 128, 256})
    check_persistent_on_one_sm(head_dim, GradientAdd::kAuto, 0, seed);
  for (int head_dim : {64, 128, 256})
    check_persistent_on_one_sm(head_dim, GradientAdd::kAtomics, 0, seed);
}

// The persistent schedule with two head splits on one CTA, then on a few CTAs and on every SM
// over the adversarial layouts.
TEST_F(CudaBackward, PersistentScheduleMatchesReference) {
  const uint64_t seed = seed_from_test_name();
  for (int head_dim : {64, 128, 256})
    check_persistent_on_one_sm(head_dim, GradientAdd::kAuto, 2, seed);
  const int sms = device_sm_count();
  for (int margin : {sms - 3, 0}) {
    cuda::KernelOptions persistent;
    persistent.backward_schedule = KernelSchedule::kPersistent;
    persistent.sm_margin = margin;
    check_adversarial_shards(128, seed + margin, persistent,
                             " sm_margin " + std::to_string(margin));
  }
}

TEST_F(CudaBackward, HeadSplitsThatDoNotDivideTheGroupAreRejected) {
  const PackedBatch batch = batch_from_lengths({{64}}, 64);
  BackwardSetup s;
  s.head_dim = 128;
  s.num_heads_q = 4;
  s.num_heads_kv = 1;
  s.kernels.backward_head_splits = 3;
  const RowProblem p = make_problem(batch, s, seed_from_test_name());
  try {
    run_cuda_steps(p, s, 1);
    ADD_FAILURE() << "head splits 3 accepted for a GQA group of 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--backward-head-splits 3"), std::string::npos)
        << e.what();
  }
}

TEST_F(CudaBackward, DeterministicModeIsCorrectAndBitIdentical) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch batch = random_packed_batch(2, 301, seed);
  for (int head_dim : {64, 128, 256}) {
    BackwardSetup s;
    s.head_dim = head_dim;
    s.kernels.deterministic = true;
    const RowProblem p = make_problem(batch, s, seed);
    const CudaGrads first = run_cuda_steps(p, s, seed);
    const CudaGrads second = run_cuda_steps(p, s, seed);
    EXPECT_EQ(first.dq, second.dq) << "head_dim " << head_dim;  // bit-identical
    EXPECT_EQ(first.dk, second.dk) << "head_dim " << head_dim;
    EXPECT_EQ(first.dv, second.dv) << "head_dim " << head_dim;
    const AttentionDims& d = p.dims;
    const std::string label = describe(s);
    expect_close("dq", first.dq, p.expected.dq, p.baseline.dq, s.dtype,
                 {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim}, label);
    expect_close("dk", first.dk, p.expected.dk, p.baseline.dk, s.dtype,
                 {d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim}, label);
    expect_close("dv", first.dv, p.expected.dv, p.baseline.dv, s.dtype,
                 {d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim}, label);
  }
}

TEST_F(CudaBackward, RejectsUnsupportedHeadDimAndDtype) {
  AttentionStep step;
  step.dims = AttentionDims{1, 8, 8, 1, 1, 96};
  step.dtype = DType::kBF16;
  int32_t dummy = 0;
  step.q = step.k = step.v = &dummy;
  step.segment_ids_q = step.positions_q = step.segment_ids_k = step.positions_k = &dummy;
  float value = 0.0f;
  const BackwardInputs in{&dummy, &value, &value};
  const BackwardAccumulators acc{&value, &value, &value};
  EXPECT_THROW(cuda::run_backward(step, in, acc, cuda::KernelOptions{}, nullptr), Error);
  step.dims.head_dim = 192;  // neither direction runs it
  EXPECT_THROW(cuda::run_backward(step, in, acc, cuda::KernelOptions{}, nullptr), Error);
  step.dims.head_dim = 64;
  step.dtype = DType::kF32;
  EXPECT_THROW(cuda::run_backward(step, in, acc, cuda::KernelOptions{}, nullptr), Error);
}

// Causal visible pairs of a batch without a window: L (L + 1) / 2 per document.
int64_t causal_pairs(const PackedBatch& batch) {
  int64_t pairs = 0;
  for (int b = 0; b < batch.batch; ++b) {
    int64_t run = 0;
    for (int t = 0; t < batch.seq_len; ++t) {
      const int32_t id = batch.segment_id(b, t);
      run = (t > 0 && id == batch.segment_id(b, t - 1)) ? run + 1 : 1;
      if (id != 0) pairs += run;
    }
  }
  return pairs;
}

// Device buffer of `count` random bf16 values in [-1, 1).
DeviceBuffer random_bf16_buffer(size_t count, uint64_t seed) {
  return to_device(random_tensor(count, DType::kBF16, seed));
}

// Throughput on the standard workloads of docs/design.md §8 (bf16, 32 q heads, 8 kv heads, head_dim
// 128, causal), atomic and deterministic dQ. A timing run, not a check: run it with
// --gtest_also_run_disabled_tests --gtest_filter='*Throughput*'.
TEST_F(CudaBackward, DISABLED_ThroughputStandardWorkloads) {
  struct Workload {
    const char* name;
    int seq_len;
    bool packed;
  };
  constexpr int kHeadsQ = 32;
  constexpr int kHeadsKv = 8;
  constexpr int kHeadDim = 128;
  constexpr int kWarmup = 2;
  constexpr int kRepeats = 10;
  std::printf("# CUDA backward, bf16, heads %d/%d, head_dim %d, causal; median of %d\n", kHeadsQ,
              kHeadsKv, kHeadDim, kRepeats);
  std::printf("# TFLOP/s = 2.5 * 4 * head_dim * num_heads_q * visible_pairs / time\n");
  std::printf("%-12s %-14s %12s %10s %10s\n", "workload", "dq", "pairs", "ms", "TFLOP/s");
  for (const Workload& w :
       {Workload{"dense-16k", 16384, false}, Workload{"packed-16k", 16384, true},
        Workload{"packed-64k", 65536, true}}) {
    PackerOptions options;
    if (w.packed) {
      options.max_doc_length = w.seq_len / 4;
    } else {
      options.source = LengthSource::kFixed;
      options.fixed_length = w.seq_len;
    }
    const PackedBatch batch = pack_documents(1, w.seq_len, options);
    const int64_t pairs = causal_pairs(batch);
    const size_t count_q = size_t(w.seq_len) * kHeadsQ * kHeadDim;
    const size_t count_k = size_t(w.seq_len) * kHeadsKv * kHeadDim;
    const DeviceBuffer q = random_bf16_buffer(count_q, 1);
    const DeviceBuffer k = random_bf16_buffer(count_k, 2);
    const DeviceBuffer v = random_bf16_buffer(count_k, 3);
    const DeviceBuffer dout = random_bf16_buffer(count_q, 4);
    const DeviceBuffer ids = to_device(batch.segment_ids);
    const DeviceBuffer pos = to_device(batch.positions);
    // lse ~ log of the visible keys of a mid-length row; delta 0: realistic magnitudes of P.
    const DeviceBuffer lse = to_device(std::vector<float>(size_t(kHeadsQ) * w.seq_len, 6.0f));
    const DeviceBuffer delta = to_device(std::vector<float>(size_t(kHeadsQ) * w.seq_len, 0.0f));
    DeviceBuffer dq(count_q * sizeof(float));
    DeviceBuffer dk(count_k * sizeof(float));
    DeviceBuffer dv(count_k * sizeof(float));
    ASSERT_EQ(cudaMemset(dq.data(), 0, dq.bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemset(dk.data(), 0, dk.bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemset(dv.data(), 0, dv.bytes()), cudaSuccess);
    AttentionStep step;
    step.dims = AttentionDims{1, w.seq_len, w.seq_len, kHeadsQ, kHeadsKv, kHeadDim};
    step.dtype = DType::kBF16;
    step.q = q.data();
    step.k = k.data();
    step.v = v.data();
    step.segment_ids_q = step.segment_ids_k = ids.as<int32_t>();
    step.positions_q = step.positions_k = pos.as<int32_t>();
    const BackwardInputs in{dout.data(), lse.as<float>(), delta.as<float>()};
    const BackwardAccumulators acc{dq.as<float>(), dk.as<float>(), dv.as<float>()};
    for (bool deterministic : {false, true}) {
      cuda::KernelOptions kernels;
      kernels.deterministic = deterministic;
      cudaEvent_t start, stop;
      ASSERT_EQ(cudaEventCreate(&start), cudaSuccess);
      ASSERT_EQ(cudaEventCreate(&stop), cudaSuccess);
      for (int i = 0; i < kWarmup; ++i) cuda::run_backward(step, in, acc, kernels, nullptr);
      std::vector<float> ms(kRepeats);
      for (float& t : ms) {
        ASSERT_EQ(cudaEventRecord(start), cudaSuccess);
        cuda::run_backward(step, in, acc, kernels, nullptr);
        ASSERT_EQ(cudaEventRecord(stop), cudaSuccess);
        ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
        ASSERT_EQ(cudaEventElapsedTime(&t, start, stop), cudaSuccess);
      }
      std::sort(ms.begin(), ms.end());
      const double median_ms = ms[kRepeats / 2];
      const double flops = 2.5 * 4.0 * kHeadDim * kHeadsQ * double(pairs);
      std::printf("%-12s %-14s %12lld %10.3f %10.1f\n", w.name,
                  deterministic ? "deterministic" : "atomic", static_cast<long long>(pairs),
                  median_ms, flops / (median_ms * 1e-3) / 1e12);
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
  }
}

}  // namespace
}  // namespace ringpack::testing
