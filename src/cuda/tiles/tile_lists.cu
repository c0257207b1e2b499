#include "cuda/tiles/tile_lists.h"

#include "cuda/common/cuda_check.h"
#include "cuda/common/ptx.h"
#include "cuda/tiles/tile_ranges.h"

namespace ringpack::cuda {
namespace {

constexpr int kListWarpsPerBlock = 4;
constexpr int kOrderThreads = 256;

// One warp per slot: classify every tile of the other side of its row against it and append the
// ones that are not skipped, in order. A tile cut short by the row end has has_padding set
// (tiles/tile_ranges.h), so it is never full.
__global__ void build_tile_lists_kernel(const TileRange* __restrict__ ranges_mine,
                                        const TileRange* __restrict__ ranges_others, int batch,
                                        int num_mine, int num_others, bool lists_of_queries,
                                        MaskSpec mask, int32_t* __restrict__ lists,
                                        int32_t* __restrict__ counts) {
  const int slot = blockIdx.x * kListWarpsPerBlock + threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (slot >= batch * num_mine) return;
  const int row = slot / num_mine;
  const TileRange mine = ranges_mine[slot];
  int32_t* list = lists + int64_t(slot) * num_others;
  int count = 0;
  for (int base = 0; base < num_others; base += kWarpSize) {
    const int j = base + lane;
    TileClass cls = TileClass::kSkip;
    if (j < num_others) {
      const TileRange other = ranges_others[int64_t(row) * num_others + j];
      cls = lists_of_queries ? classify_tile(other, mine, mask) : classify_tile(mine, other, mask);
    }
    const bool keep = cls != TileClass::kSkip;
    const unsigned kept = __ballot_sync(0xffffffffu, keep);
    if (keep) {
      const int index = count + __popc(kept & ((1u << lane) - 1u));
      list[index] = (j << 1) | (cls == TileClass::kPartial ? 1 : 0);
    }
    count += __popc(kept);
  }
  if (lane == 0) counts[slot] = count;
}

// A stable counting rank, O(n^2) over n slots, which stays far below the attention's cost.
__global__ void order_tiles_kernel(const int32_t* __restrict__ counts, int slots,
                                   int32_t* __restrict__ order) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= slots) return;
  const int32_t mine = counts[i];
  int rank = 0;
  for (int j = 0; j < slots; ++j) {
    const int32_t other = counts[j];
    rank += (other > mine || (other == mine && j < i)) ? 1 : 0;
  }
  order[rank] = i;
}

void build_tile_lists(const TileRange* ranges_mine, const TileRange* ranges_others, int batch,
                      int num_mine, int num_others, bool lists_of_queries, const MaskSpec& mask,
                      int32_t* lists, int32_t* counts, cudaStream_t stream) {
  const int slots = batch * num_mine;
  if (slots == 0) return;
  build_tile_lists_kernel<<<(slots + kListWarpsPerBlock - 1) / kListWarpsPerBlock,
                            kListWarpsPerBlock * kWarpSize, 0, stream>>>(
      ranges_mine, ranges_others, batch, num_mine, num_others, lists_of_queries, mask, lists,
      counts);
  RINGPACK_CHECK_LAUNCH();
}

void order_tiles_by_count(const int32_t* counts, int slots, int32_t* order, cudaStream_t stream) {
  if (slots == 0) return;
  order_tiles_kernel<<<(slots + kOrderThreads - 1) / kOrderThreads, kOrderThreads, 0, stream>>>(
      counts, slots, order);
  RINGPACK_CHECK_LAUNCH();
}

}  // namespace

TilePlan plan_tiles(const int32_t* segment_ids_mine, const int32_t* positions_mine, int seqlen_mine,
                    int tile_mine, const int32_t* segment_ids_others,
                    const int32_t* positions_others, int seqlen_others, int tile_others, int batch,
                    bool lists_of_queries, SlotOrder slot_order, const MaskSpec& mask,
                    cudaStream_t stream) {
  constexpr size_t kAlignment = 256;
  auto align_up = [](size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; };
  TilePlan plan;
  plan.num_mine = num_tiles(seqlen_mine, tile_mine);
  plan.num_others = num_tiles(seqlen_others, tile_others);
  const size_t slots = size_t(batch) * plan.num_mine;
  const size_t ranges_mine_bytes = align_up(sizeof(TileRange) * slots + 1);
  const size_t ranges_others_bytes = align_up(sizeof(TileRange) * batch * plan.num_others + 1);
  const size_t lists_bytes = align_up(sizeof(int32_t) * slots * plan.num_others + 1);
  const size_t counts_bytes = align_up(sizeof(int32_t) * slots + 1);
  char* scratch = nullptr;
  RINGPACK_CUDA_CHECK(cudaMallocAsync(
      reinterpret_cast<void**>(&scratch),
      ranges_mine_bytes + ranges_others_bytes + lists_bytes + 2 * counts_bytes + kAlignment,
      stream));
  plan.scratch = scratch;
  plan.ranges_mine = reinterpret_cast<TileRange*>(scratch);
  plan.ranges_others = reinterpret_cast<TileRange*>(scratch + ranges_mine_bytes);
  plan.lists = reinterpret_cast<int32_t*>(scratch + ranges_mine_bytes + ranges_others_bytes);
  plan.counts = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(plan.lists) + lists_bytes);
  plan.order = reinterpret_cast<int32_t*>(reinterpret_cast<char*>(plan.counts) + counts_bytes);
  plan.work_counter =
      reinterpret_cast<int32_t*>(reinterpret_cast<char*>(plan.order) + counts_bytes);

  compute_tile_ranges(segment_ids_mine, positions_mine, batch, seqlen_mine, tile_mine,
                      plan.ranges_mine, stream);
  compute_tile_ranges(segment_ids_others, positions_others, batch, seqlen_others, tile_others,
                      plan.ranges_others, stream);
  build_tile_lists(plan.ranges_mine, plan.ranges_others, batch, plan.num_mine, plan.num_others,
                   lists_of_queries, mask, plan.lists, plan.counts, stream);
  if (slot_order == SlotOrder::kHeaviestFirst) {
    order_tiles_by_count(plan.counts, int(slots), plan.order, stream);
  } else {
    plan.order = nullptr;
  }
  RINGPACK_CUDA_CHECK(cudaMemsetAsync(plan.work_counter, 0, sizeof(int32_t), stream));
  return plan;
}

void TilePlan::release(cudaStream_t stream) {
  if (scratch != nullptr) RINGPACK_CUDA_CHECK(cudaFreeAsync(scratch, stream));
  scratch = nullptr;
}

TilePlan plan_step_tiles(StepParams& params, int tile_q, int tile_k, bool lists_of_queries,
                         SlotOrder slot_order, cudaStream_t stream) {
  TilePlan plan =
      lists_of_queries
          ? plan_tiles(params.segment_ids_k, params.positions_k, params.seqlen_k, tile_k,
                       params.segment_ids_q, params.positions_q, params.seqlen_q, tile_q,
                       params.batch, true, slot_order, params.mask, stream)
          : plan_tiles(params.segment_ids_q, params.positions_q, params.seqlen_q, tile_q,
                       params.segment_ids_k, params.positions_k, params.seqlen_k, tile_k,
                       params.batch, false, slot_order, params.mask, stream);
  params.tile_lists = plan.lists;
  params.tile_counts = plan.counts;
  params.tile_order = plan.order;
  params.work_counter = plan.work_counter;
  params.num_tiles_q = lists_of_queries ? plan.num_others : plan.num_mine;
  params.num_tiles_k = lists_of_queries ? plan.num_mine : plan.num_others;
  return plan;
}

}  // namespace ringpack::cuda
