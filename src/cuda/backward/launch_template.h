// Definition of run_backward_instance (declared in backward/launch.h); included only by the
// explicit-instantiation files src/cuda/instances/backward_*_sm80.cu.
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/backward/dq_kernel_sm80.h"
#include "cuda/backward/kernel_sm80.h"
#include "cuda/backward/launch.h"
#include "cuda/backward/launch_sm90.h"
#include "cuda/backward/traits.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/tensor_map.h"
#include "cuda/kernel_options.h"
#include "cuda/tiles/tile_ranges.h"

namespace ringpack::cuda {

// The Hopper kernel (head_dim 64, 128 and 256, atomic dQ) when options.backward_loop, the device,
// the mode and the tensors allow it (kernel_options.h; TMA maps need 16-byte aligned bases).
// Returns whether it was launched.
template <class Element, int kHeadDim>
bool try_backward_wgmma(const BackwardParams& params, const KernelOptions& options,
                        cudaStream_t stream) {
  const bool hopper_kernel = backward_has_wgmma(kHeadDim, options.deterministic);
  if (!use_hopper_main_loop(options.backward_loop, hopper_kernel, "--backward-loop")) return false;
  if constexpr (!backward_wgmma_head_dim(kHeadDim)) {
    return false;
  } else {
    using Traits = BackwardWgmmaTraits<Element, kHeadDim>;
    const bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
    const int64_t tokens_q = int64_t(params.batch) * params.seqlen_q;
    const int64_t tokens_k = int64_t(params.batch) * params.seqlen_k;
    BackwardTensorMaps maps{};
    if (!encode_token_tile_map(&maps.q, params.q, bf16, tokens_q, params.num_heads_q, kHeadDim,
                               Traits::kBlockM) ||
        !encode_token_tile_map(&maps.dout, params.dout, bf16, tokens_q, params.num_heads_q,
                               kHeadDim, Traits::kBlockM) ||
        !encode_token_tile_map(&maps.k, params.k, bf16, tokens_k, params.num_heads_kv, kHeadDim,
                               Traits::kBlockN) ||
        !encode_token_tile_map(&maps.v, params.v, bf16, tokens_k, params.num_heads_kv, kHeadDim,
                               Traits::kBlockN)) {
      RINGPACK_CHECK(options.backward_loop != MainLoop::kWgmma,
                     "--backward-loop wgmma: TMA cannot describe q, dout, k or v (16-byte aligned "
                     "bases needed); use --backward-loop auto");
      return false;
    }
    launch_backward_wgmma<Element, kHeadDim>(params, maps, options, stream);
    return true;
  }
}

template <class Element, int kHeadDim>
void run_backward_instance(BackwardParams params, const KernelOptions& options,
                           cudaStream_t stream) {
  using Traits = BackwardTraits<Element, kHeadDim>;
  if (params.batch == 0 || params.seqlen_q == 0 || params.seqlen_k == 0) return;
  if (try_backward_wgmma<Element, kHeadDim>(params, options, stream)) return;
  RINGPACK_CHECK(
      options.backward_grad_add != GradientAdd::kTma,
      "--backward-grad-add tma needs the Hopper backward, which does not serve this "
      "step (head_dim 64 or 128, not deterministic, compute capability 9.x, aligned tensors); "
      "use --backward-grad-add auto");
  RINGPACK_CHECK(options.backward_schedule != KernelSchedule::kPersistent,
                 "--backward-schedule persistent needs the Hopper backward, which does not serve "
                 "this step (head_dim, not deterministic, compute capability 9.x, aligned "
                 "tensors); use --backward-schedule grid");
  RINGPACK_CHECK(options.backward_dq_split != DqSplit::kTurns,
                 "--backward-dq-split turns needs the Hopper backward at head_dim 64, which does "
                 "not serve this step (not deterministic, compute capability 9.x, aligned "
                 "tensors); use --backward-dq-split auto");
  const bool deterministic = options.deterministic;
  const int batch = params.batch;
  params.num_tiles_q = num_tiles(params.seqlen_q, Traits::kBlockM);
  params.num_tiles_k = num_tiles(params.seqlen_k, Traits::kBlockN);
  params.accumulate_dq = !deterministic;

  // Scratch: per-tile summaries of both sides at the tiles of each kernel, stream-ordered.
  const int dq_tiles_q = num_tiles(params.seqlen_q, Traits::kDqBlockM);
  const int dq_tiles_k = num_tiles(params.seqlen_k, Traits::kDqBlockN);
  const size_t counts[4] = {size_t(batch) * params.num_tiles_q, size_t(batch) * params.num_tiles_k,
                            deterministic ? size_t(batch) * dq_tiles_q : 0,
                            deterministic ? size_t(batch) * dq_tiles_k : 0};
  TileRange* ranges = nullptr;
  RINGPACK_CUDA_CHECK(
      cudaMallocAsync(reinterpret_cast<void**>(&ranges),
                      (counts[0] + counts[1] + counts[2] + counts[3]) * sizeof(TileRange), stream));
  TileRange* ranges_q = ranges;
  TileRange* ranges_k = ranges_q + counts[0];
  compute_tile_ranges(params.segment_ids_q, params.positions_q, batch, params.seqlen_q,
                      Traits::kBlockM, ranges_q, stream);
  compute_tile_ranges(params.segment_ids_k, params.positions_k, batch, params.seqlen_k,
                      Traits::kBlockN, ranges_k, stream);
  params.ranges_q = ranges_q;
  params.ranges_k = ranges_k;

  const auto dkdv_kernel = bwd::backward_dkdv_kernel<Traits>;
  RINGPACK_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Traits::kSmemBytes));
  const dim3 dkdv_grid(params.num_tiles_k, params.num_heads_kv * params.head_splits, batch);
  dkdv_kernel<<<dkdv_grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  RINGPACK_CHECK_LAUNCH();

  if (deterministic) {
    BackwardParams dq_params = params;
    dq_params.num_tiles_q = dq_tiles_q;
    dq_params.num_tiles_k = dq_tiles_k;
    TileRange* dq_ranges_q = ranges_k + counts[1];
    TileRange* dq_ranges_k = dq_ranges_q + counts[2];
    compute_tile_ranges(params.segment_ids_q, params.positions_q, batch, params.seqlen_q,
                        Traits::kDqBlockM, dq_ranges_q, stream);
    compute_tile_ranges(params.segment_ids_k, params.positions_k, batch, params.seqlen_k,
                        Traits::kDqBlockN, dq_ranges_k, stream);
    dq_params.ranges_q = dq_ranges_q;
    dq_params.ranges_k = dq_ranges_k;
    const auto dq_kernel = bwd::backward_dq_kernel<Traits>;
    RINGPACK_CUDA_CHECK(cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             Traits::kDqSmemBytes));
    const dim3 dq_grid(dq_tiles_q, params.num_heads_q, batch);
    dq_kernel<<<dq_grid, Traits::kDqKernelThreads, Traits::kDqSmemBytes, stream>>>(dq_params);
    RINGPACK_CHECK_LAUNCH();
  }
  RINGPACK_CUDA_CHECK(cudaFreeAsync(ranges, stream));
}

}  // namespace ringpack::cuda
