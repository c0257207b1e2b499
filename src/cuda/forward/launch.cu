// The forward launcher: validates an AttentionStep, builds ForwardParams, runs the
// per-tile pre-pass on the device (tile ranges -> per query tile, the list of key tiles that are
// not skipped; a heaviest-first order of query tiles, which the portable loop launches in), then
// launches the kernel instance for (head_dim, dtype, epilogue). No host synchronisation; scratch
// is stream-ordered.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/cuda_check.h"
#include "cuda/common/mma_sync.h"
#include "cuda/common/tensor_map.h"
#include "cuda/forward/api.h"
#include "cuda/forward/instances.h"
#include "cuda/kernel_options.h"
#include "cuda/tiles/tile_lists.h"
#include "cuda/tiles/tile_ranges.h"

namespace ringpack::cuda {
namespace {

constexpr int kMaxGridY = 65535;

template <class Element, int kHeadDim>
void dispatch_wgmma(const ForwardParams& params, const ForwardTensorMaps& maps, bool merge,
                    const KernelOptions& options, cudaStream_t stream) {
  using Traits = ForwardWgmmaTraits<kHeadDim, Element>;
  return merge ? launch_forward_wgmma<Traits, true>(params, maps, options, stream)
               : launch_forward_wgmma<Traits, false>(params, maps, options, stream);
}

template <class Element>
void dispatch(const ForwardParams& params, const ForwardTensorMaps* maps, int head_dim, bool merge,
              const KernelOptions& options, cudaStream_t stream) {
  if (maps != nullptr) {  // the wgmma kernel (choose_wgmma)
    switch (head_dim) {
      case 64:
        return dispatch_wgmma<Element, 64>(params, *maps, merge, options, stream);
      case 128:
        return dispatch_wgmma<Element, 128>(params, *maps, merge, options, stream);
      case 256:
        return dispatch_wgmma<Element, 256>(params, *maps, merge, options, stream);
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

// The wgmma kernel serves head_dim 64, 128 and 256 on Hopper (kernel_options.h); it also needs
// tensors that TMA maps can describe (16-byte aligned bases), else the mma.sync loop runs (or, with
// MainLoop::kWgmma, an error).
bool choose_wgmma(const AttentionStep& step, MainLoop loop, ForwardTensorMaps& maps) {
  const AttentionDims& dims = step.dims;
  if (!use_hopper_main_loop(loop, forward_has_wgmma(dims.head_dim), "--forward-loop")) {
    return false;
  }
  const bool bf16 = step.dtype == DType::kBF16;
  const ForwardTileConfig tiles = forward_wgmma_tiles(dims.head_dim);
  const bool mapped =
      encode_token_tile_map(&maps.q, step.q, bf16, int64_t(dims.batch) * dims.seqlen_q,
                            dims.num_heads_q, dims.head_dim, tiles.block_m) &&
      encode_token_tile_map(&maps.k, step.k, bf16, int64_t(dims.batch) * dims.seqlen_k,
                            dims.num_heads_kv, dims.head_dim, tiles.block_n) &&
      encode_token_tile_map(&maps.v, step.v, bf16, int64_t(dims.batch) * dims.seqlen_k,
                            dims.num_heads_kv, dims.head_dim, tiles.block_n);
  RINGPACK_CHECK(mapped || loop != MainLoop::kWgmma,
                 "--forward-loop wgmma: TMA cannot describe q, k or v (16-byte aligned bases "
                 "needed); use --forward-loop auto");
  return mapped;
}

void run_forward_impl(const AttentionStep& step, bool merge, void* out, float* lse, float* out_acc,
                      float* lse_acc, const KernelOptions& options, cudaStream_t stream) {
  const AttentionDims& dims = step.dims;
  check_forward_supported(step.dtype, dims.head_dim);
  check_attention_step(step, "cuda");
  if (dims.batch == 0 || dims.seqlen_q == 0 || dims.num_heads_q == 0) return;

  ForwardTensorMaps maps{};
  const bool wgmma = choose_wgmma(step, options.forward_loop, maps);
  const ForwardTileConfig tiles =
      wgmma ? forward_wgmma_tiles(dims.head_dim) : forward_tile_config(dims.head_dim);
  const int num_tiles_q = num_tiles(dims.seqlen_q, tiles.block_m);
  const int slots = dims.batch * num_tiles_q;
  RINGPACK_CHECK(slots <= kMaxGridY, "batch * ceil(seqlen_q / ", tiles.block_m, ") = ", slots,
                 " query tiles exceed the grid limit ", kMaxGridY, "; split the batch");
  RINGPACK_CHECK(wgmma || options.forward_schedule != KernelSchedule::kPersistent,
                 "--forward-schedule persistent needs the Hopper forward, which does not serve "
                 "this step (head_dim, device, or tensors TMA cannot describe); use "
                 "--forward-schedule auto");
  RINGPACK_CHECK(wgmma || options.sm_margin == 0, "--sm-margin ", options.sm_margin,
                 " needs the persistent Hopper forward, which does not serve this step (head_dim, "
                 "device, or tensors TMA cannot describe); use --sm-margin 0");
  RINGPACK_CHECK(wgmma || options.forward_overlap != MmaOverlap::kPingPong,
                 "--forward-overlap pingpong needs the Hopper forward, which does not serve this "
                 "step (head_dim, device, or tensors TMA cannot describe); use --forward-overlap "
                 "auto");

  ForwardParams params{};
  static_cast<StepParams&>(params) = make_step_params(step);
  // The Hopper loop takes its own order (descending_tile); the portable one the plan's.
  TilePlan plan =
      plan_step_tiles(params, tiles.block_m, tiles.block_n, /*lists_of_queries=*/false,
                      wgmma ? SlotOrder::kFromIndex : SlotOrder::kHeaviestFirst, stream);
  params.out = out;
  params.lse = lse;
  params.out_acc = out_acc;
  params.lse_acc = lse_acc;

  if (step.dtype == DType::kBF16) {
    dispatch<__nv_bfloat16>(params, wgmma ? &maps : nullptr, dims.head_dim, merge, options, stream);
  } else {
    dispatch<__half>(params, wgmma ? &maps : nullptr, dims.head_dim, merge, options, stream);
  }
  plan.release(stream);
}

}  // namespace

void check_forward_supported(DType dtype, int head_dim) {
  RINGPACK_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "dtype ", dtype_name(dtype),
                 " is not supported by the CUDA backend; use --dtype bf16 or --dtype fp16");
  RINGPACK_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, "head_dim ", head_dim,
                 " is not supported by the CUDA backend; use --head-dim 64, 128 or 256");
}

void run_forward(const AttentionStep& step, const ForwardAccumulators& acc,
                 const KernelOptions& options, cudaStream_t stream) {
  RINGPACK_CHECK(acc.out != nullptr && acc.lse != nullptr,
                 "forward accumulators are missing (out / lse); allocate them before the step");
  run_forward_impl(step, true, nullptr, nullptr, acc.out, acc.lse, options, stream);
}

void run_forward_direct(const AttentionStep& step, void* out, float* lse,
                        const KernelOptions& options, cudaStream_t stream) {
  RINGPACK_CHECK(out != nullptr && lse != nullptr, "forward outputs are missing (out / lse)");
  run_forward_impl(step, false, out, lse, nullptr, nullptr, options, stream);
}

}  // namespace ringpack::cuda
