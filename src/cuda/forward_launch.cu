// The forward launcher (STYLE.md 1): validates an AttentionStep, builds ForwardParams, runs the
// per-tile pre-pass on the device (tile ranges -> per query tile, the list of key tiles that are
// not skipped; a heaviest-first order of query tiles), then launches the kernel instance for
// (head_dim, dtype, epilogue). No host synchronisation; scratch is stream-ordered.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cuda/cuda_check.h"
#include "cuda/forward_api.h"
#include "cuda/forward_instances.h"
#include "cuda/forward_mma.h"
#include "cuda/tensor_map.h"
#include "cuda/tile_ranges.h"

namespace ringpack::cuda {
namespace {

constexpr int kListWarpsPerBlock = 4;
constexpr int kOrderThreads = 256;
constexpr int kMaxGridY = 65535;

// One warp per query tile (slot = b * num_tiles_q + t): classify every key tile of row b against
// it and append the ones that are not skipped, in order, as (key_tile << 1) | partial. A ragged
// last key tile is always partial (its columns past seqlen_k must be masked).
__global__ void build_tile_lists_kernel(const TileRange* __restrict__ ranges_q,
                                        const TileRange* __restrict__ ranges_k, int batch,
                                        int num_tiles_q, int num_tiles_k, bool ragged_k,
                                        MaskSpec mask, int32_t* __restrict__ tile_lists,
                                        int32_t* __restrict__ tile_counts) {
  const int slot = blockIdx.x * kListWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (slot >= batch * num_tiles_q) return;
  const int row = slot / num_tiles_q;
  const TileRange q = ranges_q[slot];
  int32_t* list = tile_lists + int64_t(slot) * num_tiles_k;
  int count = 0;
  for (int base = 0; base < num_tiles_k; base += kWarpSize) {
    const int j = base + lane;
    TileClass cls = TileClass::kSkip;
    if (j < num_tiles_k) {
      cls = classify_tile(q, ranges_k[int64_t(row) * num_tiles_k + j], mask);
      if (cls == TileClass::kFull && ragged_k && j == num_tiles_k - 1) cls = TileClass::kPartial;
    }
    const bool keep = cls != TileClass::kSkip;
    const unsigned kept = __ballot_sync(0xffffffffu, keep);
    if (keep) {
      const int index = count + __popc(kept & ((1u << lane) - 1u));
      list[index] = (j << 1) | (cls == TileClass::kPartial ? 1 : 0);
    }
    count += __popc(kept);
  }
  if (lane == 0) tile_counts[slot] = count;
}

// order[rank] = slot, ranks by descending key-tile count (ties by slot): a stable counting rank,
// O(n^2) over n = batch * num_tiles_q slots, which stays far below the attention's cost.
__global__ void order_tiles_kernel(const int32_t* __restrict__ tile_counts, int slots,
                                   int32_t* __restrict__ order) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= slots) return;
  const int32_t mine = tile_counts[i];
  int rank = 0;
  for (int j = 0; j < slots; ++j) {
    const int32_t other = tile_counts[j];
    rank += (other > mine || (other == mine && j < i)) ? 1 : 0;
  }
  order[rank] = i;
}

template <class Element, int kHeadDim>
void dispatch_wgmma(const ForwardParams& params, const ForwardTensorMaps& maps, bool merge,
                    cudaStream_t stream) {
  using Traits = ForwardWgmmaTraits<kHeadDim, Element>;
  return merge ? launch_forward_wgmma<Traits, true>(params, maps, stream)
               : launch_forward_wgmma<Traits, false>(params, maps, stream);
}

template <class Element>
void dispatch(const ForwardParams& params, const ForwardTensorMaps* maps, int head_dim, bool merge,
              cudaStream_t stream) {
  if (maps != nullptr) {  // the wgmma kernel (choose_wgmma)
    switch (head_dim) {
      case 64:
        return dispatch_wgmma<Element, 64>(params, *maps, merge, stream);
      case 128:
        return dispatch_wgmma<Element, 128>(params, *maps, merge, stream);
      default:
        RINGPACK_FAIL("head_dim ", head_dim, " has no wgmma forward kernel");
    }
  }
  switch (head_dim) {
    case 64:
      return merge ? launch_forward<ForwardTraitsFor<64, Element>, true>(params, stream)
                   : launch_forward<ForwardTraitsFor<64, Element>, false>(params, stream);
    case 128:
      return merge ? launch_forward<ForwardTraitsFor<128, Element>, true>(params, stream)
                   : launch_forward<ForwardTraitsFor<128, Element>, false>(params, stream);
    case 256:
      return merge ? launch_forward<ForwardTraitsFor<256, Element>, true>(params, stream)
                   : launch_forward<ForwardTraitsFor<256, Element>, false>(params, stream);
    default:
      RINGPACK_FAIL("head_dim ", head_dim, " has no CUDA forward kernel; use 64, 128 or 256");
  }
}

// The main loop for this device and head_dim: wgmma on sm_90 unless RINGPACK_FORWARD_MMA_SYNC=1
// asks for the portable mma.sync loop (A/B benchmarks, tests of both loops), or the tensors
// cannot be described by TMA maps (base addresses not 16-byte aligned): then the mma.sync loop.
bool choose_wgmma(int head_dim) {
  int device = 0;
  int major = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  RINGPACK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const char* force = std::getenv("RINGPACK_FORWARD_MMA_SYNC");
  const bool forced_mma_sync = force != nullptr && std::string_view(force) == "1";
  return !forced_mma_sync && use_forward_wgmma(major, head_dim);
}

size_t align_up(size_t bytes) {
  constexpr size_t kAlignment = 256;
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

void run_forward_impl(const AttentionStep& step, bool merge, void* out, float* lse, float* out_acc,
                      float* lse_acc, cudaStream_t stream) {
  const AttentionDims& dims = step.dims;
  check_forward_supported(step.dtype, dims.head_dim);
  RINGPACK_CHECK(dims.batch >= 0 && dims.seqlen_q >= 0 && dims.seqlen_k >= 0,
                 "negative shape: batch ", dims.batch, ", seqlen_q ", dims.seqlen_q, ", seqlen_k ",
                 dims.seqlen_k);
  RINGPACK_CHECK(dims.num_heads_kv > 0 && dims.num_heads_q % dims.num_heads_kv == 0, "num_heads_q ",
                 dims.num_heads_q, " is not a multiple of num_heads_kv ", dims.num_heads_kv,
                 "; use a kv head count that divides the query heads");
  if (dims.batch == 0 || dims.seqlen_q == 0 || dims.num_heads_q == 0) return;

  ForwardTensorMaps maps{};
  const bool bf16 = step.dtype == DType::kBF16;
  const bool wgmma =
      choose_wgmma(dims.head_dim) &&
      encode_token_tile_map(&maps.q, step.q, bf16, int64_t(dims.batch) * dims.seqlen_q,
                            dims.num_heads_q, dims.head_dim, kForwardWgmmaTiles.block_m) &&
      encode_token_tile_map(&maps.k, step.k, bf16, int64_t(dims.batch) * dims.seqlen_k,
                            dims.num_heads_kv, dims.head_dim, kForwardWgmmaTiles.block_n) &&
      encode_token_tile_map(&maps.v, step.v, bf16, int64_t(dims.batch) * dims.seqlen_k,
                            dims.num_heads_kv, dims.head_dim, kForwardWgmmaTiles.block_n);
  const ForwardTileConfig tiles = wgmma ? kForwardWgmmaTiles : forward_tile_config(dims.head_dim);
  const int num_tiles_q = num_tiles(dims.seqlen_q, tiles.block_m);
  const int num_tiles_k = num_tiles(dims.seqlen_k, tiles.block_n);
  const int slots = dims.batch * num_tiles_q;
  RINGPACK_CHECK(slots <= kMaxGridY, "batch * ceil(seqlen_q / ", tiles.block_m, ") = ", slots,
                 " query tiles exceed the grid limit ", kMaxGridY, "; split the batch");

  // Scratch, one stream-ordered allocation: [ranges_q | ranges_k | lists | counts | order].
  const size_t ranges_q_bytes = align_up(sizeof(TileRange) * slots);
  const size_t ranges_k_bytes = align_up(sizeof(TileRange) * dims.batch * num_tiles_k + 1);
  const size_t lists_bytes = align_up(sizeof(int32_t) * size_t(slots) * num_tiles_k + 1);
  const size_t counts_bytes = align_up(sizeof(int32_t) * slots);
  char* scratch = nullptr;
  RINGPACK_CUDA_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&scratch),
                      ranges_q_bytes + ranges_k_bytes + lists_bytes + 2 * counts_bytes, stream));
  auto* ranges_q = reinterpret_cast<TileRange*>(scratch);
  auto* ranges_k = reinterpret_cast<TileRange*>(scratch + ranges_q_bytes);
  auto* lists = reinterpret_cast<int32_t*>(scratch + ranges_q_bytes + ranges_k_bytes);
  auto* counts =
      reinterpret_cast<int32_t*>(scratch + ranges_q_bytes + ranges_k_bytes + lists_bytes);
  auto* order = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(counts) + counts_bytes);

  compute_tile_ranges(step.segment_ids_q, step.positions_q, dims.batch, dims.seqlen_q,
                      tiles.block_m, ranges_q, stream);
  compute_tile_ranges(step.segment_ids_k, step.positions_k, dims.batch, dims.seqlen_k,
                      tiles.block_n, ranges_k, stream);
  const bool ragged_k = dims.seqlen_k % tiles.block_n != 0;
  build_tile_lists_kernel<<<(slots + kListWarpsPerBlock - 1) / kListWarpsPerBlock,
                            kListWarpsPerBlock * kWarpSize, 0, stream>>>(
      ranges_q, ranges_k, dims.batch, num_tiles_q, num_tiles_k, ragged_k, step.mask, lists, counts);
  RINGPACK_CHECK_LAUNCH();
  order_tiles_kernel<<<(slots + kOrderThreads - 1) / kOrderThreads, kOrderThreads, 0, stream>>>(
      counts, slots, order);
  RINGPACK_CHECK_LAUNCH();

  ForwardParams params{};
  params.q = step.q;
  params.k = step.k;
  params.v = step.v;
  params.segment_ids_q = step.segment_ids_q;
  params.positions_q = step.positions_q;
  params.segment_ids_k = step.segment_ids_k;
  params.positions_k = step.positions_k;
  params.tile_lists = lists;
  params.tile_counts = counts;
  params.tile_order = order;
  params.out = out;
  params.lse = lse;
  params.out_acc = out_acc;
  params.lse_acc = lse_acc;
  params.batch = dims.batch;
  params.seqlen_q = dims.seqlen_q;
  params.seqlen_k = dims.seqlen_k;
  params.num_heads_q = dims.num_heads_q;
  params.num_heads_kv = dims.num_heads_kv;
  params.heads_per_kv = dims.num_heads_q / dims.num_heads_kv;
  params.num_tiles_q = num_tiles_q;
  params.num_tiles_k = num_tiles_k;
  params.q_token_stride = int64_t(dims.num_heads_q) * dims.head_dim;
  params.kv_token_stride = int64_t(dims.num_heads_kv) * dims.head_dim;
  params.scale = resolve_scale(step.scale, dims.head_dim);
  params.scale_log2 = params.scale * kLog2e;
  params.mask = step.mask;

  if (step.dtype == DType::kBF16) {
    dispatch<__nv_bfloat16>(params, wgmma ? &maps : nullptr, dims.head_dim, merge, stream);
  } else {
    dispatch<__half>(params, wgmma ? &maps : nullptr, dims.head_dim, merge, stream);
  }
  RINGPACK_CUDA_CHECK(cudaFreeAsync(scratch, stream));
}

}  // namespace

void check_forward_supported(DType dtype, int head_dim) {
  RINGPACK_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "dtype ", dtype_name(dtype),
                 " is not supported by the CUDA backend; use --dtype bf16 or --dtype fp16");
  RINGPACK_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim ", head_dim,
                 " is not supported by the CUDA backend; use --head-dim 64, 128 or 256");
}

void run_forward(const AttentionStep& step, const ForwardAccumulators& acc, cudaStream_t stream) {
  RINGPACK_CHECK(acc.out != nullptr && acc.lse != nullptr,
                 "forward accumulators are missing (out / lse); allocate them before the step");
  run_forward_impl(step, true, nullptr, nullptr, acc.out, acc.lse, stream);
}

void run_forward_direct(const AttentionStep& step, void* out, float* lse, cudaStream_t stream) {
  RINGPACK_CHECK(out != nullptr && lse != nullptr, "forward outputs are missing (out / lse)");
  run_forward_impl(step, false, out, lse, nullptr, nullptr, stream);
}

}  // namespace ringpack::cuda
