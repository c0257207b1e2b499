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
#include "cuda/tiles/tile_lists.h"

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
      "step (head_dim 64, 128 or 256, not deterministic, compute capability 9.x, aligned tensors); "
      "use --backward-grad-add auto");
  RINGPACK_CHECK(options.backward_schedule != KernelSchedule::kPersistent,
                 "--backward-schedule persistent needs the Hopper backward, which does not serve "
                 "this step (head_dim, not deterministic, compute capability 9.x, aligned "
                 "tensors); use --backward-schedule auto");
  const bool deterministic = options.deterministic;
  params.accumulate_dq = !deterministic;

  // dK/dV: one CTA per (key tile, kv head and head split), the heaviest key tiles first; each
  // walks its key tile's list of query tiles in the tile plan.
  TilePlan plan = plan_step_tiles(params, Traits::kBlockM, Traits::kBlockN,
                                  /*lists_of_queries=*/true, SlotOrder::kHeaviestFirst, stream);
  const auto dkdv_kernel = bwd::backward_dkdv_kernel<Traits>;
  RINGPACK_CUDA_CHECK(cudaFuncSetAttribute(dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           Traits::kSmemBytes));
  const dim3 dkdv_grid(params.batch * params.num_tiles_k, params.num_heads_kv * params.head_splits);
  dkdv_kernel<<<dkdv_grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(params);
  RINGPACK_CHECK_LAUNCH();
  plan.release(stream);

  if (deterministic) {
    // dQ: one CTA per (query tile, query head) at the dQ kernel's tiles, walking its query
    // tile's list of key tiles.
    BackwardParams dq_params = params;
    TilePlan dq_plan = plan_step_tiles(dq_params, Traits::kDqBlockM, Traits::kDqBlockN,
                                       /*lists_of_queries=*/false, SlotOrder::kFromIndex, stream);
    const auto dq_kernel = bwd::backward_dq_kernel<Traits>;
    RINGPACK_CUDA_CHECK(cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             Traits::kDqSmemBytes));
    const dim3 dq_grid(dq_params.num_tiles_q, params.num_heads_q, params.batch);
    dq_kernel<<<dq_grid, Traits::kDqKernelThreads, Traits::kDqSmemBytes, stream>>>(dq_params);
    RINGPACK_CHECK_LAUNCH();
    dq_plan.release(stream);
  }
}

}  // namespace ringpack::cuda
