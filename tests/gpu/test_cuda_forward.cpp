// The CUDA forward kernel against the fp64 reference (docs/design.md §2, §7): adversarial layouts,
// striped and dual_chunk_swap shards (non-contiguous positions), bf16 and fp16, head_dim
// 64/128/256, GQA 1/4/8, B > 1, lengths that are not tile multiples, causal / non-causal /
// window masks; direct and merge epilogues. Outputs are poisoned (NaN) before each run; errors
// must be within 2x of the reference's own low-precision error (compare_tensor).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/compare.h"
#include "cpu/reference_attention.h"
#include "cuda/forward/api.h"
#include "gpu/gpu_test_support.h"
#include "ringpack/error.h"
#include "ringpack/reorder.h"

namespace ringpack::testing {
namespace {

// One forward problem: queries with their ids/positions against keys with theirs.
struct ForwardCase {
  std::string name;
  int batch = 1;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int num_heads_q = 4;
  int num_heads_kv = 2;
  int head_dim = 128;
  DType dtype = DType::kBF16;
  MaskSpec mask;
  std::vector<int32_t> segment_ids_q, positions_q;  // [batch, seqlen_q]
  std::vector<int32_t> segment_ids_k, positions_k;  // [batch, seqlen_k]
  cuda::KernelOptions kernels;                      // the main loop (default: auto)
};

// Self-attention over a packed batch (queries and keys are the same tokens).
ForwardCase self_case(std::string name, const PackedBatch& layout) {
  ForwardCase c;
  c.name = std::move(name);
  c.batch = layout.batch;
  c.seqlen_q = c.seqlen_k = layout.seq_len;
  c.segment_ids_q = c.segment_ids_k = layout.segment_ids;
  c.positions_q = c.positions_k = layout.positions;
  return c;
}

// Tokens [begin, begin + count) of every row of a [batch, seq_len] field.
std::vector<int32_t> slice_rows(const std::vector<int32_t>& field, int batch, int seq_len,
                                int begin, int count) {
  std::vector<int32_t> out;
  for (int b = 0; b < batch; ++b)
    out.insert(out.end(), field.begin() + size_t(b) * seq_len + begin,
               field.begin() + size_t(b) * seq_len + begin + count);
  return out;
}

// Queries of shard `rank_q` against keys of shard `rank_k` after a reorder of the batch.
ForwardCase shard_case(std::string name, const PackedBatch& layout, int cp, const ReorderSpec& spec,
                       int rank_q, int rank_k) {
  const std::vector<int32_t> index = reorder_index(layout.seq_len, cp, spec);
  std::vector<int32_t> seg(layout.segment_ids.size()), pos(layout.positions.size());
  gather_tokens(layout.segment_ids.data(), seg.data(), index, layout.batch, sizeof(int32_t));
  gather_tokens(layout.positions.data(), pos.data(), index, layout.batch, sizeof(int32_t));
  const int shard = layout.seq_len / cp;
  ForwardCase c;
  c.name = std::move(name);
  c.batch = layout.batch;
  c.seqlen_q = c.seqlen_k = shard;
  c.segment_ids_q = slice_rows(seg, layout.batch, layout.seq_len, rank_q * shard, shard);
  c.positions_q = slice_rows(pos, layout.batch, layout.seq_len, rank_q * shard, shard);
  c.segment_ids_k = slice_rows(seg, layout.batch, layout.seq_len, rank_k * shard, shard);
  c.positions_k = slice_rows(pos, layout.batch, layout.seq_len, rank_k * shard, shard);
  return c;
}

// The inputs of a case on the host (rounded to dtype) and on the device.
struct CaseInputs {
  HostTensor q, k, v;
  DeviceBuffer d_q, d_k, d_v, d_seg_q, d_pos_q, d_seg_k, d_pos_k;
  AttentionStep step;
  ReferenceProblem problem;
  std::vector<double> q64, k64, v64;
};

void prepare(const ForwardCase& c, uint64_t seed, CaseInputs& in) {
  const size_t q_count = size_t(c.batch) * c.seqlen_q * c.num_heads_q * c.head_dim;
  const size_t kv_count = size_t(c.batch) * c.seqlen_k * c.num_heads_kv * c.head_dim;
  in.q = random_tensor(q_count, c.dtype, seed);
  in.k = random_tensor(kv_count, c.dtype, seed + 1);
  in.v = random_tensor(kv_count, c.dtype, seed + 2);
  in.d_q = to_device(in.q);
  in.d_k = to_device(in.k);
  in.d_v = to_device(in.v);
  in.d_seg_q = to_device(c.segment_ids_q);
  in.d_pos_q = to_device(c.positions_q);
  in.d_seg_k = to_device(c.segment_ids_k);
  in.d_pos_k = to_device(c.positions_k);

  in.step.dims = {c.batch, c.seqlen_q, c.seqlen_k, c.num_heads_q, c.num_heads_kv, c.head_dim};
  in.step.dtype = c.dtype;
  in.step.mask = c.mask;
  in.step.q = in.d_q.data();
  in.step.k = in.d_k.data();
  in.step.v = in.d_v.data();
  in.step.segment_ids_q = in.d_seg_q.as<int32_t>();
  in.step.positions_q = in.d_pos_q.as<int32_t>();
  in.step.segment_ids_k = in.d_seg_k.as<int32_t>();
  in.step.positions_k = in.d_pos_k.as<int32_t>();

  in.q64 = as_doubles(in.q, c.dtype);
  in.k64 = as_doubles(in.k, c.dtype);
  in.v64 = as_doubles(in.v, c.dtype);
  in.problem.dims = in.step.dims;
  in.problem.mask = c.mask;
  in.problem.scale = double(resolve_scale(0.0f, c.head_dim));
  in.problem.q = in.q64.data();
  in.problem.k = in.k64.data();
  in.problem.v = in.v64.data();
  in.problem.segment_ids_q = c.segment_ids_q.data();
  in.problem.positions_q = c.positions_q.data();
  in.problem.segment_ids_k = c.segment_ids_k.data();
  in.problem.positions_k = c.positions_k.data();
}

std::vector<double> as_double(const std::vector<float>& values) {
  return std::vector<double>(values.begin(), values.end());
}

// Checks O and LSE against the fp64 reference with the 2x-of-lowprec rule.
void expect_matches_reference(const ForwardCase& c, const CaseInputs& in,
                              const std::vector<double>& out, const std::vector<double>& lse) {
  const ReferenceForward ref = reference_forward(in.problem);
  const ReferenceForward low = lowprec_forward(in.problem, c.dtype);
  const std::vector<int64_t> o_shape = {c.batch, c.seqlen_q, c.num_heads_q, c.head_dim};
  const std::vector<int64_t> l_shape = {c.batch, c.num_heads_q, c.seqlen_q};
  for (const TensorError& e :
       {compare_tensor("out", out, ref.out, &low.out, c.dtype, o_shape, bshd_axis_names()),
        compare_tensor("lse", lse, ref.lse, &low.lse, c.dtype, l_shape, lse_axis_names())}) {
    EXPECT_TRUE(e.passed) << c.name << " " << dtype_name(c.dtype) << " d=" << c.head_dim
                          << " hq=" << c.num_heads_q << " hkv=" << c.num_heads_kv << ": " << e.name
                          << " rel_err " << e.rel_err << " (baseline " << e.baseline_rel_err
                          << ", tolerance " << e.tolerance << "), max_abs " << e.max_abs_err
                          << ", masked mismatches " << e.masked_mismatches << "; worst " << e.worst;
  }
}

// Direct mode: O in dtype, LSE fp32, both poisoned first.
void run_direct(const ForwardCase& c, const CaseInputs& in, std::vector<double>& out,
                std::vector<double>& lse) {
  const size_t o_count = size_t(c.batch) * c.seqlen_q * c.num_heads_q * c.head_dim;
  const size_t l_count = size_t(c.batch) * c.num_heads_q * c.seqlen_q;
  DeviceBuffer d_out = poisoned_buffer(o_count, c.dtype);
  DeviceBuffer d_lse = poisoned_buffer(l_count, DType::kF32);
  cuda::run_forward_direct(in.step, d_out.data(), d_lse.as<float>(), c.kernels, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  out = as_double(download_as_float(d_out, c.dtype, o_count));
  lse = as_double(to_host<float>(d_lse, l_count));
}

void check_direct(const ForwardCase& c, uint64_t seed) {
  CaseInputs in;
  prepare(c, seed, in);
  std::vector<double> out, lse;
  run_direct(c, in, out, lse);
  expect_matches_reference(c, in, out, lse);
}

class CudaForward : public GpuTest {};

TEST_F(CudaForward, AdversarialLayoutsMatchReference) {
  const uint64_t seed = seed_from_test_name();
  for (const NamedLayout& layout : adversarial_layouts(200, 4)) {
    ForwardCase c = self_case(layout.name, layout.batch);
    c.num_heads_q = 4;
    c.num_heads_kv = 1;
    check_direct(c, seed);
  }
}

TEST_F(CudaForward, DtypesHeadDimsAndGqaMatchReference) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch layout = random_packed_batch(2, 257, seed);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int head_dim : {64, 128, 256}) {
      for (int group : {1, 4, 8}) {
        ForwardCase c = self_case("random_packed_b2_s257", layout);
        c.dtype = dtype;
        c.head_dim = head_dim;
        c.num_heads_q = 8;
        c.num_heads_kv = 8 / group;
        check_direct(c, seed + head_dim + group);
      }
    }
  }
}

TEST_F(CudaForward, MasksMatchReference) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch layout = random_packed_batch(2, 300, seed);
  const std::vector<std::pair<std::string, MaskSpec>> masks = {{"non_causal", {false, -1}},
                                                               {"causal_window_17", {true, 17}},
                                                               {"non_causal_window_9", {false, 9}},
                                                               {"causal_window_0", {true, 0}}};
  for (const auto& [name, mask] : masks) {
    ForwardCase c = self_case(name, layout);
    c.mask = mask;
    check_direct(c, seed);
  }
}

TEST_F(CudaForward, ReorderedShardsMatchReference) {
  const uint64_t seed = seed_from_test_name();
  const PackedBatch layout = random_packed_batch(2, 1024, seed);
  const int cp = 4;
  const std::vector<std::pair<std::string, ReorderSpec>> specs = {
      {"striped", {ReorderKind::kStriped, 1}},
      {"striped_ss16", {ReorderKind::kStriped, 16}},
      {"dual_chunk_swap", {ReorderKind::kDualChunkSwap, 1}}};
  for (const auto& [name, spec] : specs) {
    for (const auto& [rank_q, rank_k] : {std::pair{1, 1}, std::pair{1, 2}, std::pair{3, 0}}) {
      ForwardCase c =
          shard_case(name + "_q" + std::to_string(rank_q) + "_k" + std::to_string(rank_k), layout,
                     cp, spec, rank_q, rank_k);
      check_direct(c, seed + rank_q * cp + rank_k);
    }
  }
}

TEST_F(CudaForward, UnequalQueryAndKeyLengthsMatchReference) {
  // Queries: the last 100 tokens of each row; keys: the first 333 (not tile multiples).
  const uint64_t seed = seed_from_test_name();
  const PackedBatch layout = random_packed_batch(3, 433, seed);
  ForwardCase c;
  c.name = "q100_k333";
  c.batch = 3;
  c.seqlen_q = 100;
  c.seqlen_k = 333;
  c.segment_ids_q = slice_rows(layout.segment_ids, 3, 433, 333, 100);
  c.positions_q = slice_rows(layout.positions, 3, 433, 333, 100);
  c.segment_ids_k = slice_rows(layout.segment_ids, 3, 433, 0, 333);
  c.positions_k = slice_rows(layout.positions, 3, 433, 0, 333);
  check_direct(c, seed);
}

TEST_F(CudaForward, LongDocumentUsesFullTilesCorrectly) {
  // One 1100-token document: most tile pairs are full or skipped, a few are partial.
  const uint64_t seed = seed_from_test_name();
  ForwardCase c = self_case("one_document_1100", batch_from_lengths({{1100}}, 1100));
  c.num_heads_q = 2;
  c.num_heads_kv = 1;
  check_direct(c, seed);
}

// Each head dim through the default main loop (wgmma on Hopper) on one document of many key tiles,
// partial tiles at both ends: a small case for compute-sanitizer (scripts/gpu_check.sh). Both with
// the auto schedule and overlap and with grid + warpgroup chosen, so that the kernels auto passes
// over at head_dim 64 (grid) and 256 (warpgroup) stay tested too.
TEST_F(CudaForward, HeadDimsOnALongDocument) {
  const uint64_t seed = seed_from_test_name();
  for (int head_dim : {64, 128, 256}) {
    for (bool chosen : {false, true}) {
      ForwardCase c =
          self_case(std::string("one_document_1100") + (chosen ? " grid warpgroup" : ""),
                    batch_from_lengths({{1100}}, 1100));
      c.head_dim = head_dim;
      c.num_heads_q = 2;
      c.num_heads_kv = 1;
      if (chosen) {
        c.kernels.forward_schedule = KernelSchedule::kGrid;
        c.kernels.forward_overlap = MmaOverlap::kWarpgroup;
      }
      check_direct(c, seed + head_dim);
    }
  }
}

// The Hopper forward's persistent schedule on all SMs and on fewer (KernelOptions::sm_margin):
// with one CTA left, a single CTA walks every work item (query tiles with no key tiles among them:
// the padded rows), so the producer's ring of items, Q's hand-over between items and the K/V phases
// that run on across items all turn over many times; every head dim on one layout, head_dim 128 on
// all adversarial layouts, then a few CTAs and every SM. Small enough for compute-sanitizer.
TEST_F(CudaForward, PersistentCtasOnFewSmsMatchReference) {
  const uint64_t seed = seed_from_test_name();
  const int sms = device_sm_count();
  const NamedLayout padded{"short_documents_then_padding", short_documents_then_padding()};
  for (int head_dim : {64, 128, 256}) {
    ForwardCase c = self_case(padded.name + " on one CTA", padded.batch);
    c.head_dim = head_dim;
    c.kernels.forward_schedule = KernelSchedule::kPersistent;
    c.kernels.sm_margin = sms - 1;
    check_direct(c, seed + head_dim);
  }
  for (int margin : {sms - 1, sms - 3, 0}) {
    for (const NamedLayout& layout : adversarial_layouts(333, 3)) {
      ForwardCase c = self_case(layout.name + " sm_margin " + std::to_string(margin), layout.batch);
      c.kernels.forward_schedule = KernelSchedule::kPersistent;
      c.kernels.sm_margin = margin;
      check_direct(c, seed + margin);
    }
  }
}

// The Hopper forward's ping-pong (KernelOptions::forward_overlap: the two consumer warpgroups take
// turns to issue their MMAs): every head dim under both schedules, the persistent one on a single
// CTA so that the turns run on across many items, items without key tiles among them; head_dim
// 128 on the adversarial layouts. Small enough for compute-sanitizer.
TEST_F(CudaForward, PingPongMatchesReference) {
  const uint64_t seed = seed_from_test_name();
  const int sms = device_sm_count();
  const NamedLayout padded{"short_documents_then_padding", short_documents_then_padding()};
  for (int head_dim : {64, 128, 256}) {
    for (KernelSchedule schedule : {KernelSchedule::kGrid, KernelSchedule::kPersistent}) {
      const bool persistent = schedule == KernelSchedule::kPersistent;
      ForwardCase c = self_case(padded.name + (persistent ? " on one CTA" : ""), padded.batch);
      c.head_dim = head_dim;
      c.kernels.forward_overlap = MmaOverlap::kPingPong;
      c.kernels.forward_schedule = schedule;
      c.kernels.sm_margin = persistent ? sms - 1 : 0;
      check_direct(c, seed + head_dim);
    }
  }
  for (const NamedLayout& layout : adversarial_layouts(333, 3)) {
    ForwardCase c = self_case(layout.name, layout.batch);
    c.kernels.forward_overlap = MmaOverlap::kPingPong;
    check_direct(c, seed);
  }
}

// The portable mma.sync main loop, which sm_90 skips for every head dim in favour of wgmma:
// forced through KernelOptions::forward_loop so both loops stay tested on a Hopper machine.
TEST_F(CudaForward, MmaSyncLoopMatchesReference) {
  const uint64_t seed = seed_from_test_name();
  for (const NamedLayout& layout : adversarial_layouts(200, 4)) {
    ForwardCase c = self_case(layout.name, layout.batch);
    c.num_heads_q = 4;
    c.num_heads_kv = 1;
    c.kernels.forward_loop = MainLoop::kMmaSync;
    check_direct(c, seed);
  }
  for (int head_dim : {64, 128, 256}) {
    ForwardCase c = self_case("one_document_1100", batch_from_lengths({{1100}}, 1100));
    c.head_dim = head_dim;
    c.num_heads_q = 2;
    c.num_heads_kv = 1;
    c.kernels.forward_loop = MainLoop::kMmaSync;
    check_direct(c, seed + head_dim);
  }
}

TEST_F(CudaForward, MergeFromEmptyAccumulatorsEqualsDirect) {
  const uint64_t seed = seed_from_test_name();
  ForwardCase c = self_case("random_packed", random_packed_batch(2, 333, seed));
  CaseInputs in;
  prepare(c, seed, in);
  std::vector<double> out, lse;
  run_direct(c, in, out, lse);

  const size_t o_count = size_t(c.batch) * c.seqlen_q * c.num_heads_q * c.head_dim;
  const size_t l_count = size_t(c.batch) * c.num_heads_q * c.seqlen_q;
  DeviceBuffer acc_out = to_device(std::vector<float>(o_count, 0.0f));
  DeviceBuffer acc_lse = to_device(std::vector<float>(l_count, -INFINITY));
  cuda::run_forward(in.step, {acc_out.as<float>(), acc_lse.as<float>()}, c.kernels, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> merged_out = to_host<float>(acc_out, o_count);
  const std::vector<float> merged_lse = to_host<float>(acc_lse, l_count);
  size_t differing = 0;
  for (size_t i = 0; i < o_count; ++i)
    differing += round_to(c.dtype, merged_out[i]) != float(out[i]) ? 1 : 0;
  for (size_t i = 0; i < l_count; ++i)
    differing +=
        merged_lse[i] != float(lse[i]) && !(std::isinf(lse[i]) && std::isinf(merged_lse[i]));
  EXPECT_EQ(differing, 0u) << "merge into (0, -inf) must reproduce the direct epilogue";
}

TEST_F(CudaForward, TwoMergedStepsMatchReference) {
  // Keys split into two blocks (one CP step each), merged into fp32 accumulators: the result
  // equals attention over all keys. The accumulators are poisoned-free by construction
  // (0, -inf), and every query row must end finite or -inf. On Hopper, with each overlap and
  // schedule of the forward (the merge epilogue follows the ping-pong's turns too, and the
  // persistent schedule's output staging).
  const uint64_t seed = seed_from_test_name();
  for (const auto& [overlap, schedule] :
       {std::pair{MmaOverlap::kWarpgroup, KernelSchedule::kGrid},
        std::pair{MmaOverlap::kPingPong, KernelSchedule::kGrid},
        std::pair{MmaOverlap::kWarpgroup, KernelSchedule::kPersistent},
        std::pair{MmaOverlap::kPingPong, KernelSchedule::kPersistent}}) {
    const bool hopper_only =
        overlap == MmaOverlap::kPingPong || schedule == KernelSchedule::kPersistent;
    if (hopper_only && !cuda::device_is_hopper()) continue;
    SCOPED_TRACE(std::string(mma_overlap_name(overlap)) + " " + kernel_schedule_name(schedule));
    const int seq_len = 390;
    const int split = 137;
    const PackedBatch layout = random_packed_batch(2, seq_len, seed);
    ForwardCase whole = self_case("two_steps", layout);
    whole.num_heads_q = 8;
    whole.num_heads_kv = 2;
    whole.kernels.forward_overlap = overlap;
    whole.kernels.forward_schedule = schedule;
    CaseInputs in;
    prepare(whole, seed, in);

    const size_t o_count = size_t(whole.batch) * seq_len * whole.num_heads_q * whole.head_dim;
    const size_t l_count = size_t(whole.batch) * whole.num_heads_q * seq_len;
    DeviceBuffer acc_out = to_device(std::vector<float>(o_count, 0.0f));
    DeviceBuffer acc_lse = to_device(std::vector<float>(l_count, -INFINITY));
    const size_t token_elems = size_t(whole.num_heads_kv) * whole.head_dim;
    for (const auto& [begin, count] : {std::pair{0, split}, std::pair{split, seq_len - split}}) {
      // Keys/values [begin, begin + count) of every row, as their own contiguous block.
      std::vector<std::byte> k_block, v_block;
      const size_t elem = dtype_size(whole.dtype);
      for (int b = 0; b < whole.batch; ++b) {
        const size_t from = (size_t(b) * seq_len + begin) * token_elems * elem;
        const size_t bytes = size_t(count) * token_elems * elem;
        k_block.insert(k_block.end(), in.k.bytes.begin() + from, in.k.bytes.begin() + from + bytes);
        v_block.insert(v_block.end(), in.v.bytes.begin() + from, in.v.bytes.begin() + from + bytes);
      }
      const std::vector<int32_t> seg = slice_rows(layout.segment_ids, 2, seq_len, begin, count);
      const std::vector<int32_t> pos = slice_rows(layout.positions, 2, seq_len, begin, count);
      DeviceBuffer d_k = to_device(k_block), d_v = to_device(v_block);
      DeviceBuffer d_seg = to_device(seg), d_pos = to_device(pos);
      AttentionStep step = in.step;
      step.dims.seqlen_k = count;
      step.k = d_k.data();
      step.v = d_v.data();
      step.segment_ids_k = d_seg.as<int32_t>();
      step.positions_k = d_pos.as<int32_t>();
      cuda::run_forward(step, {acc_out.as<float>(), acc_lse.as<float>()}, whole.kernels, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    // The accumulated O is fp32; round it to dtype as a CP run's final cast would.
    std::vector<double> out;
    for (float x : to_host<float>(acc_out, o_count)) out.push_back(round_to(whole.dtype, x));
    expect_matches_reference(whole, in, out, as_double(to_host<float>(acc_lse, l_count)));
  }
}

TEST_F(CudaForward, RejectsUnsupportedConfigurationsWithTheFix) {
  try {
    cuda::check_forward_supported(DType::kF32, 128);
    ADD_FAILURE() << "fp32 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
  try {
    cuda::check_forward_supported(DType::kBF16, 96);
    ADD_FAILURE() << "head_dim 96 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("96"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ringpack::testing
