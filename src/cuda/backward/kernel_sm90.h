// The dK/dV/dQ backward kernel for Hopper (sm_90a): warp-specialised, TMA-fed, wgmma, head_dim
// 64, 128 and 256, dQ added in place (not deterministic). Device code; included only by
// src/cuda/instances/backward_*_sm90.cu.
//
// Math (docs/design.md §2), per visible pair of query i and key j, with P = exp(scale s - lse_i):
//   dV_j += P dO_i;  dP = <dO_i, V_j>;  dS = P (dP - delta_i);
//   dK_j += scale dS Q_i;  dQ_i += scale dS K_j.
//
// Work item = one key tile of kBlockN = 128 keys of one kv head (and one or all of its GQA query
// heads). Grid schedule: one CTA per item. Persistent schedule (KernelOptions::backward_schedule):
// one CTA per SM (sm_margin fewer) walks items in the grid's order, claimed from a counter one
// item ahead; the Q/dO stages run on across items, and the next item's K/V wait until the
// consumers are done with the current one (docs/cuda_kernels.md).
// CTA = 2 consumer warpgroups + 1 producer warpgroup (setmaxnreg moves the producer's registers
// to the consumers). Warpgroup w owns keys [64 w, 64 w + 64); its dK and dV rows stay in
// registers for the item's whole walk. The producer loads K and V once per item, then per listed
// query tile (tile_lists, built by the launcher; skipped tiles never appear) Q, dO (TMA) and the
// tile's lse, delta and, for partial tiles, the visible-key interval of each query, into
// kStages stages (three at head_dim 64, two otherwise) guarded by full/empty mbarriers. Per
// query tile of kBlockM = 64, each consumer warpgroup:
//   S^T = K_w Q^T and dP^T = V_w dO^T      (wgmma 64 x 64, K and V K-major, Q and dO K-major)
//   P^T, dS^T in registers                  (exp2 with lse * log2 e; the mask on partial tiles)
//   dV_w += P^T dO, dK_w += dS^T Q          (A from registers, dO and Q read MN-major)
//   dS^T -> shared memory, a named barrier (both warpgroups; at head_dim 64 each alone), then
//   head_dim 128: dQ[:, 64 w, 64 w + 64) = dS K[:, 64 w ...) over all 128 keys,
//   head_dim 64:  dQ partial = dS_w K_w over this warpgroup's 64 keys (launch_sm90.h says why),
//   head_dim 256: both warpgroups own the same 64 keys, each its half of the dK/dV columns and
//                 dQ[:, 128 w, 128 w + 128), and S^T, dP^T over its half of the queries; P^T
//                 and dS^T both go to shared memory, and dV, dK read them there (kDimSplit,
//                 launch_sm90.h),
//   (A = dS^T read MN-major), added to the fp32 dq accumulator: each warp stages its 16 query rows
//   in shared memory and adds them while the next step's S^T and dP^T run, by two tensor reductions
//   of [16][32] boxes (GradAdd::kTiles, TMA maps of the accumulators; dK and dV go out the same way
//   at the end), or with float2 atomics from registers (kAtomics). At head_dim 256 (kTiles; in the
//   kernel kDqInStage) the rows are staged in the step's Q or dO stage as four boxes a warp,
//   reduced at once, and the stage goes back to the producer once they have been read.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cuda/backward/launch_sm90.h"
#include "cuda/backward/params.h"
#include "cuda/backward/traits.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/mma_sync.h"
#include "cuda/common/persistent.h"
#include "cuda/common/tensor_map.h"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.h"
#include "cuda/common/work_ring.h"
#include "cuda/forward/softmax.h"
#include "cuda/tiles/tile_lists.h"

namespace ringpack::cuda {

// One work item of the persistent schedule as the producer hands it to the consumers: key tile
// [n0, n0 + kBlockN) of batch row `batch`, kv head h_kv and its query heads from head0, the
// listed query tiles, and steps = tile_count x query heads ((query head, query tile) pairs);
// steps < 0: no work is left.
struct BackwardWork {
  const int32_t* tile_list;
  int batch;
  int n0;
  int h_kv;
  int head0;
  int tile_count;
  int steps;
};

template <class Traits>
struct BackwardWgmmaSmem {
  using Element = typename Traits::Element;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kBlockM = Traits::kBlockM;
  alignas(1024) Element k[Traits::kKVElems];             // [2][kBlockN][64], 128B swizzle
  alignas(1024) Element v[Traits::kKVElems];             // [2][kBlockN][64]
  alignas(1024) Element q[kStages][Traits::kQElems];     // [kStages][kBlockM][64] each
  alignas(1024) Element dout[kStages][Traits::kQElems];  // [kStages][kBlockM][64] each
  // Two [kBlockN keys][64 queries] tiles: dS^T, two buffers; at head_dim 256 P^T and dS^T.
  alignas(1024) Element key_query[2][Traits::kKeyQueryElems];
  // Per pair of queries (2 c, 2 c + 1): their lse * log2(e) (+inf where nothing is visible, so
  // P = 0) and delta, {lse_2c, lse_2c+1, delta_2c, delta_2c+1}: one 16-byte load per n8 tile.
  float4 row_terms[kStages][kBlockM / 2];
  int4 visible[kStages][kBlockM];  // partial tiles: VisibleKeys {segment, pos_lo, pos_hi, -}
  // GradAdd::kTiles: each consumer warp's 16 rows of its dQ half (fp32) as two [16][32] boxes in
  // the 128-byte swizzle of the dq tensor map (swizzled_box_offset), the source of its reductions
  // (one unused warp's worth with kDqInQStages, which stages them in the Q and dO stages).
  alignas(1024) float dq[Traits::kDqInQStages ? 1 : Traits::kNumConsumerThreads / 32][kDqBoxes]
                        [kGradBoxFloats];
  uint64_t kv_full;
  uint64_t q_full[kStages];
  uint64_t q_empty[kStages];
  // Persistent schedule only.
  uint64_t kv_empty;  // every consumer thread is done with the item's K, V and staging
  // The CTA's work items; items without visible pairs wait on nothing else, so the producer could
  // overtake the consumers without the ring's empty barrier.
  WorkRing<BackwardWork, true> work;
};

// Offset (floats) of a consumer's fragment pair (row, 8 t + quad_col), row < 16, in
// [kGradBoxRows][kGradBoxCols] boxes with the 128-byte swizzle of the fp32 tensor maps: n8 tile t
// lies in box t / 4 as 16-byte chunks 2 (t % 4) and 2 (t % 4) + 1 of its row, and chunk c of row
// r is stored at chunk c ^ (r mod 8).
__device__ __forceinline__ int swizzled_box_offset(int row, int t, int quad_col) {
  constexpr int kChunkFloats = 4;                   // floats per 16-byte chunk
  constexpr int kTilesPerBox = kGradBoxCols / 8;    // n8 tiles per box row
  constexpr int kChunksPerTile = 8 / kChunkFloats;  // 2
  const int chunk = kChunksPerTile * (t % kTilesPerBox) + quad_col / kChunkFloats;
  return (t / kTilesPerBox) * kGradBoxFloats + row * kGradBoxCols +
         (chunk ^ (row % 8)) * kChunkFloats + quad_col % kChunkFloats;
}

// Stages a warp's 16 accumulator rows (n8 tiles 0 .. kTiles - 1, times `scale`) as
// swizzled_box_offset boxes at `stage`; rows quad_row and quad_row + 8 of each tile.
// The hardware serves a 64-bit store a half-warp (rows 4 h .. 4 h + 3) at a time. Were every lane
// to store tile t, rows r and r ^ 1 would write the same two chunk positions (2-way bank
// conflicts: 4 wavefronts a store where 2 do). So the lanes of odd rows store tile t ^ 2 in the
// store of tile t: their chunks move by 4 positions, and the half-warp's four rows cover eight
// distinct chunks. Every lane still stores every tile once. The pair is chosen by a select, not
// read as acc[t ^ flip]: a run-time index into the accumulators would put them in local memory.
template <int kTiles>
__device__ __forceinline__ void stage_grad_rows(float* stage, const float (&acc)[kTiles][4],
                                                float scale, int quad_row, int quad_col) {
  static_assert(kTiles % 4 == 0, "tile t ^ 2 must be one of the warp's tiles");
  const int flip = (quad_row & 1) ? 2 : 0;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      const float2 pair = flip ? make_float2(acc[t ^ 2][2 * r], acc[t ^ 2][2 * r + 1])
                               : make_float2(acc[t][2 * r], acc[t][2 * r + 1]);
      *reinterpret_cast<float2*>(stage +
                                 swizzled_box_offset(quad_row + 8 * r, t ^ flip, quad_col)) =
          make_float2(scale * pair.x, scale * pair.y);
    }
}

// Adds `boxes` staged boxes (columns col0, col0 + kGradBoxCols, ...) to the accumulator of `map`
// at (head, row0, batch) by tensor reductions (the caller commits the bulk group). One lane calls
// it.
__device__ __forceinline__ void reduce_grad_boxes(const CUtensorMap* map, const float* stage,
                                                  int boxes, int col0, int head, int row0,
                                                  int batch) {
#pragma unroll
  for (int box = 0; box < boxes; ++box)
    tma_reduce_add_4d(map, stage + box * kGradBoxFloats, col0 + kGradBoxCols * box, head, row0,
                      batch);
}

template <class Traits, GradAdd kAdd, bool kPersistent>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    backward_wgmma_kernel(const __grid_constant__ BackwardParams p,
                          const __grid_constant__ BackwardTensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  using Ops = ElementOps<Element>;
  using Smem = BackwardWgmmaSmem<Traits>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kStages = Traits::kStages;
  constexpr int kColBlocks = kHeadDim / kSwizzleCols;  // 64-column blocks of a row
  constexpr int kDSteps = kHeadDim / kWgmmaK;          // k16 steps over head_dim
  constexpr int kQSteps = kBlockM / kWgmmaK;           // k16 steps over the query tile
  // dQ: k16 steps over the keys each warpgroup sums (all 128, or its own 64 keys at head_dim 64).
  constexpr bool kDqByKeys = Traits::kDqByKeys;
  constexpr int kDqKeySteps = (kDqByKeys ? kBlockN / 2 : kBlockN) / kWgmmaK;
  constexpr int kStepsPerBlock = kSwizzleCols / kWgmmaK;  // 4
  constexpr bool kDimSplit = Traits::kDimSplit;
  // S^T and dP^T of a warpgroup: its keys x the tile's 64 queries, or at head_dim 256 (kDimSplit,
  // both warpgroups own the same keys) x its half of the queries, [32 w, 32 w + 32).
  constexpr int kScoreQueries = kDimSplit ? kBlockM / 2 : kBlockM;
  constexpr int kSTiles = kScoreQueries / 8;            // n8 tiles of S^T (queries)
  constexpr int kScoreSteps = kScoreQueries / kWgmmaK;  // k16 chunks of the P^T, dS^T fragments
  constexpr int kHTiles = Traits::kGroupCols / 8;       // n8 tiles of this warpgroup's dK, dV
  constexpr int kQTilesHalf = Traits::kDqCols / 8;      // n8 tiles of this warpgroup's dQ part
  constexpr int kConsumerWarps = Traits::kNumConsumerThreads / kWarpSize;
  constexpr uint32_t kStepBytes = kWgmmaK * sizeof(Element);       // 32
  constexpr uint32_t kBlockBytesKV = kBlockN * kSwizzleLineBytes;  // 16 KB
  constexpr uint32_t kBlockBytesQ = kBlockM * kSwizzleLineBytes;   // 8 KB
  constexpr uint32_t kRowStepBytes = kWgmmaK * kSwizzleLineBytes;  // 16 rows: 2 KB
  using MmaS = WgmmaOps<Element, kScoreQueries>;                   // S^T, dP^T
  using MmaKV = WgmmaOps<Element, Traits::kGroupCols>;             // 64 x group columns (dK, dV)
  using MmaDq = WgmmaOps<Element, Traits::kDqCols>;                // 64 x dQ part columns

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Smem& smem = *reinterpret_cast<Smem*>(smem_raw);

  // Key tiles in row order within each (kv head, head split), one head after the other: the CTAs
  // of a wave then hold neighbouring key tiles, whose walks share most of their query rows, so
  // the Q, dO and dq rows they touch stay in L2. In the tile plan's heaviest-first order, which
  // the portable loops keep, groups of 132 key tiles walk up to 448 query tiles at head_dim 256 on
  // packed-64k, against 198 in row order (bench/tile_geometry.py --wave), and row order takes
  // 0.83-0.995x its time on packed rows, least at head_dim 256 on packed-64k. Interleaving the
  // heads measured about 20% slower (docs/history.md). The persistent schedule walks the same
  // order: work item w is the grid's CTA (x, y) = (w % X, w / X), X = batch x key tiles.
  // x, y unsigned as blockIdx's, so that the grid schedule's arithmetic stays what it was.
  auto decode = [&](unsigned x, unsigned y) {
    BackwardWork work;
    const int slot = int(x);  // batch * num_tiles_k + key tile
    work.batch = slot / p.num_tiles_k;
    work.n0 = (slot % p.num_tiles_k) * kBlockN;
    work.h_kv = y / p.head_splits;
    const int split = y % p.head_splits;
    const int heads_per_cta = p.heads_per_kv / p.head_splits;
    work.head0 = work.h_kv * p.heads_per_kv + split * heads_per_cta;
    work.tile_list = p.tile_lists + int64_t(slot) * p.num_tiles_q;
    work.tile_count = p.tile_counts[slot];
    work.steps = work.tile_count * heads_per_cta;  // (query head, query tile) pairs
    return work;
  };
  const int num_x = p.batch * p.num_tiles_k;
  const int num_work = num_x * p.num_heads_kv * p.head_splits;
  BackwardWork grid_work{};
  if constexpr (!kPersistent) {
    grid_work = decode(blockIdx.x, blockIdx.y);
    if (grid_work.steps == 0) return;  // no visible pair: this CTA adds nothing
  }

  const int warp = warp_uniform(threadIdx.x / kWarpSize);
  const int lane = threadIdx.x % kWarpSize;
  if (threadIdx.x == 0) {
    mbarrier_init(&smem.kv_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&smem.q_full[s], kWarpSize);  // every producer lane (row vectors)
      mbarrier_init(&smem.q_empty[s], Traits::kNumConsumerThreads);
    }
    if constexpr (kPersistent) {
      mbarrier_init(&smem.kv_empty, Traits::kNumConsumerThreads);
      smem.work.init(Traits::kNumConsumerThreads);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x >= Traits::kNumConsumerThreads) {
    // ---- producer warpgroup; its first warp loads ----
    set_max_registers_dec<Traits::kProducerRegisters>();
    if (warp != kConsumerWarps) return;
    // K and V of an item, once (k_row0: its first key in the [batch * seqlen_k] maps).
    auto load_kv = [&](int64_t k_row0, int h_kv) {
      mbarrier_expect_bytes(&smem.kv_full, 2 * Traits::kKVElems * sizeof(Element));
      for (int b = 0; b < kColBlocks; ++b) {
        tma_load_3d(smem.k + b * kBlockN * kSwizzleCols, &maps.k, b * kSwizzleCols, h_kv,
                    int(k_row0), &smem.kv_full);
        tma_load_3d(smem.v + b * kBlockN * kSwizzleCols, &maps.v, b * kSwizzleCols, h_kv,
                    int(k_row0), &smem.kv_full);
      }
      mbarrier_arrive(&smem.kv_full);
    };
    // The CTA's step-th (query head, query tile) pair, the item's it-th: Q and dO by TMA, the
    // row vectors by the lanes.
    auto load_step = [&](int step, int it, int batch, int head0, const int32_t* tile_list,
                         int tile_count) {
      const int stage = step % kStages;
      const int entry = tile_list[it % tile_count];
      const int head = head0 + it / tile_count;
      const int q0 = (entry >> 1) * kBlockM;
      const int64_t q_row0 = int64_t(batch) * p.seqlen_q + q0;
      mbarrier_wait(&smem.q_empty[stage], ((step / kStages) & 1) ^ 1);
      if (lane == 0) {
        mbarrier_expect_bytes(&smem.q_full[stage], 2 * Traits::kQElems * sizeof(Element));
        for (int b = 0; b < kColBlocks; ++b) {
          tma_load_3d(smem.q[stage] + b * kBlockM * kSwizzleCols, &maps.q, b * kSwizzleCols, head,
                      int(q_row0), &smem.q_full[stage]);
          tma_load_3d(smem.dout[stage] + b * kBlockM * kSwizzleCols, &maps.dout, b * kSwizzleCols,
                      head, int(q_row0), &smem.q_full[stage]);
        }
      }
      const int64_t vec0 = (int64_t(batch) * p.num_heads_q + head) * p.seqlen_q;
      for (int i = lane; i < kBlockM; i += kWarpSize) {
        const int row = q0 + i;
        const bool in_range = row < p.seqlen_q;
        const float lse = in_range ? p.lse[vec0 + row] : -INFINITY;
        float* terms = &smem.row_terms[stage][i / 2].x;
        terms[i % 2] = lse == -INFINITY ? INFINITY : lse * kLog2e;
        terms[2 + i % 2] = in_range ? p.delta[vec0 + row] : 0.0f;
        if (entry & 1) {
          const int64_t token = q_row0 + i;
          const VisibleKeys keys = visible_keys(in_range ? p.segment_ids_q[token] : 0,
                                                in_range ? p.positions_q[token] : 0, p.mask);
          smem.visible[stage][i] = make_int4(keys.segment, keys.pos_lo, keys.pos_hi, 0);
        }
      }
      mbarrier_arrive(&smem.q_full[stage]);  // after this lane's row vectors are written
    };

    if constexpr (!kPersistent) {
      const BackwardWork& work = grid_work;
      const int64_t k_row0 = int64_t(work.batch) * p.seqlen_k + work.n0;
      if (lane == 0) load_kv(k_row0, work.h_kv);
      for (int it = 0; it < work.steps; ++it)
        load_step(it, it, work.batch, work.head0, work.tile_list, work.tile_count);
    } else {
      int w = blockIdx.x;
      int step = 0;    // (query head, query tile) pairs loaded by this CTA
      int loaded = 0;  // items with steps whose K and V this CTA loaded
      for (int n = 0;; ++n) {
        // The item stays in shared memory, and the loop reads it there (24 registers a thread).
        const BackwardWork& work = smem.work.publish(n, lane, [&] {
          return w < num_work ? decode(unsigned(w % num_x), unsigned(w / num_x))
                              : BackwardWork{nullptr, 0, 0, 0, 0, 0, -1};
        });
        if (work.steps < 0) break;
        // The next item, claimed now: the counter's latency hides behind this item's loads.
        int next = 0;
        if (lane == 0) next = claim_next_work(p.work_counter);
        if (work.steps > 0) {
          // K, V, Q and dO stages once the consumers are done with the previous item (its last
          // dQ reads K; with tile adds its epilogue stages dK and dV in all of them).
          mbarrier_wait(&smem.kv_empty, (loaded & 1) ^ 1);
          if (lane == 0) load_kv(int64_t(work.batch) * p.seqlen_k + work.n0, work.h_kv);
          for (int it = 0; it < work.steps; ++it, ++step)
            load_step(step, it, work.batch, work.head0, work.tile_list, work.tile_count);
          ++loaded;
        }
        w = __shfl_sync(0xffffffffu, next, 0);
      }
    }
    return;
  }

  // ---- consumer warpgroups ----
  set_max_registers_inc<Traits::kConsumerRegisters>();
  const int warpgroup = warp_uniform(threadIdx.x / kWarpgroupThreads);
  const int warp_in_group = warp % 4;
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  // This warp's first key of the tile; with kDimSplit both warpgroups own the same 64 keys.
  const int key_row0 = (kDimSplit ? 0 : 64 * warpgroup) + 16 * warp_in_group;
  // This warpgroup's first dK/dV column, and the first query of its S^T and dP^T.
  const int kv_col0 = kDimSplit ? warpgroup * Traits::kGroupCols : 0;
  const int score_q0 = kDimSplit ? warpgroup * kScoreQueries : 0;

  // K-major descriptors of this warpgroup's 64 keys of K and V (A of S^T and dP^T).
  const uint32_t kv_rows_offset = kDimSplit ? 0 : warpgroup * 64 * kSwizzleLineBytes;
  const uint64_t desc_k_rows =
      advance_descriptor(smem_descriptor(smem.k, kChunkBytes, kSwizzleAtomBytes), kv_rows_offset);
  const uint64_t desc_v_rows =
      advance_descriptor(smem_descriptor(smem.v, kChunkBytes, kSwizzleAtomBytes), kv_rows_offset);
  // This warpgroup's part of dQ: its first column and, in the key-major dS^T and K tiles, the
  // byte offset of its first key (its own 64 keys at head_dim 64; all keys, from column block
  // `warpgroup` at 128 and 2 `warpgroup` at 256). B of the dQ MMAs: K read MN-major from there.
  const int dq_col0 = kDqByKeys ? 0 : warpgroup * Traits::kDqCols;
  const uint32_t dq_key_offset = kDqByKeys ? kv_rows_offset : 0;
  const uint64_t desc_k_cols =
      advance_descriptor(smem_descriptor(smem.k, kBlockBytesKV, kSwizzleAtomBytes),
                         kDqByKeys ? dq_key_offset : (dq_col0 / kSwizzleCols) * kBlockBytesKV);

  // One item: its steps are the CTA's pairs `step`, `step` + 1, ... (the grid schedule: 0); its
  // dK and dV are added at the end.
  auto process = [&](const BackwardWork& work, int step, uint32_t kv_parity) {
    const int batch = work.batch;
    const int n0 = work.n0;
    const int h_kv = work.h_kv;
    const int head0 = work.head0;
    const int32_t* tile_list = work.tile_list;
    const int tile_count = work.tile_count;
    const int steps = work.steps;

    // Segment id and position of this thread's two keys (g, g + 8); keys past seqlen_k: padding.
    int32_t key_segment[2];
    int32_t key_position[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = n0 + key_row0 + quad_row + 8 * r;
      const bool in_range = key < p.seqlen_k;
      const int64_t token = int64_t(batch) * p.seqlen_k + key;
      key_segment[r] = in_range ? p.segment_ids_k[token] : 0;
      key_position[r] = in_range ? p.positions_k[token] : 0;
    }

    float acc_dv[kHTiles][4] = {};
    float acc_dk[kHTiles][4] = {};

    // dq rows of a query head, from this warpgroup's first dQ column.
    const auto dq_row = [&](int query, int head) {
      return p.dq + (int64_t(batch) * p.seqlen_q + query) * p.q_token_stride +
             int64_t(head) * kHeadDim + dq_col0;
    };
    // Tiled dQ: each step stages its rows in smem.dq (right after its dQ MMAs); lane 0 issues their
    // two tensor reductions during the next step's S^T and dP^T MMAs (or after the loop), off the
    // critical path. At head_dim 256 (kDqInStage) each warpgroup stages its 64 x 128 part in the
    // step's Q (warpgroup 0) or dO (warpgroup 1) stage once both warpgroups' MMAs are done with
    // them, lane 0 reduces its warp's four boxes at once, and the stage is released during the next
    // step's S^T and dP^T, once the reductions have read it (release_staged).
    // kDqTiles: dQ through smem.dq; kDqInStage: dQ through the Q / dO stages; either way (kTiles)
    // dK and dV are staged at the end and added by tensor reductions too.
    constexpr bool kTiles = kAdd == GradAdd::kTiles;
    constexpr bool kDqTiles = kTiles && !Traits::kDqInQStages;
    constexpr bool kDqInStage = kTiles && Traits::kDqInQStages;
    float* const dq_stage = &smem.dq[warp][0][0];
    struct DqRows {
      int query0;  // this warp's first staged query row
      int head;
    };
    DqRows staged_rows{0, 0};
    // This warp's staged dQ rows (`boxes` boxes at `stage`) added by lane 0's tensor reductions.
    const auto reduce_staged_dq = [&](const float* stage, int boxes, DqRows rows) {
      fence_proxy_async_shared();  // the staging stores, before the bulk engine reads them
      __syncwarp();
      if (lane != 0) return;
      reduce_grad_boxes(&maps.dq, stage, boxes, dq_col0, rows.head, rows.query0, batch);
      bulk_commit_group();
    };
    const auto add_staged_dq = [&] { reduce_staged_dq(dq_stage, kDqBoxes, staged_rows); };
    const auto release_staged = [&](int staged_stage) {
      if (lane == 0) bulk_wait_group<0, true>();
      __syncwarp();
      mbarrier_arrive(&smem.q_empty[staged_stage]);
    };

    // The step's query tile (its tile list entry) and query head: steps walk the list once per
    // query head. The next step's entry is loaded one step ahead (after the fence before the dQ
    // MMAs), so that no fence waits for that global load, and the loop divides nothing.
    int tile_index = 0;
    int head = head0;
    int entry = tile_list[0];

    // S^T = K_w Q^T and dP^T = V_w dO^T of step `it` (either or both, one commit group): 64 keys
    // x 64 queries each, fp32. Both at the step's start, except at head_dim 64 (kScoresAhead):
    // there the next step's S^T is issued before the wait for this step's dQ, once the dK and dV
    // MMAs (which read P^T and dS^T from registers) are done, so that it runs while dQ is staged,
    // and only dP^T at the step's start: 2-3.5% faster. At 128 the same was 1-3% slower (dK, dV,
    // dQ and S^T live together: 192 of the 240 registers a thread, and ptxas spills), and dP^T
    // ahead too was slower at 64 (docs/benchmarks.md, "Session 20"); at 256 dK, dV and dQ alone
    // take 192.
    constexpr bool kScoresAhead = kHeadDim == 64;
    float s[1][kSTiles][4];
    float dp[kSTiles][4];
    const auto issue_scores = [&](int it, bool with_s, bool with_dp) {
      const int stage = (step + it) % kStages;
      mbarrier_wait(&smem.q_full[stage], ((step + it) / kStages) & 1);
      const uint32_t score_rows = score_q0 * kSwizzleLineBytes;  // B: this warpgroup's queries
      const uint64_t desc_q = advance_descriptor(
          smem_descriptor(smem.q[stage], kChunkBytes, kSwizzleAtomBytes), score_rows);
      const uint64_t desc_do = advance_descriptor(
          smem_descriptor(smem.dout[stage], kChunkBytes, kSwizzleAtomBytes), score_rows);
      wgmma_fence();
#pragma unroll
      for (int d = 0; d < kDSteps; ++d) {
        const uint32_t in_block = (d % kStepsPerBlock) * kStepBytes;
        const uint32_t offset_kv = (d / kStepsPerBlock) * kBlockBytesKV + in_block;
        const uint32_t offset_q = (d / kStepsPerBlock) * kBlockBytesQ + in_block;
        if (with_s)
          MmaS::template ss<0>(s[0], advance_descriptor(desc_k_rows, offset_kv),
                               advance_descriptor(desc_q, offset_q), d > 0);
        if (with_dp)
          MmaS::template ss<0>(dp, advance_descriptor(desc_v_rows, offset_kv),
                               advance_descriptor(desc_do, offset_q), d > 0);
      }
      wgmma_commit();
    };

    mbarrier_wait(&smem.kv_full, kv_parity);
    if constexpr (kScoresAhead) issue_scores(0, true, false);  // process() runs no empty item
    for (int it = 0; it < steps; ++it) {
      const int stage = (step + it) % kStages;
      const int q0 = (entry >> 1) * kBlockM;
      issue_scores(it, !kScoresAhead, true);
      if constexpr (kDqTiles) {
        if (it > 0) add_staged_dq();  // the previous step's dQ, while this step's MMAs run
      }
      if constexpr (kDqInStage) {
        if (it > 0) release_staged((step + it - 1) % kStages);
      }
      wgmma_wait<0>();
      fence_accumulators(s[0]);
      fence_accumulators(dp);

      // Partial tiles: the scores of invisible pairs become -inf first, in a pass of their own
      // (P^T = 2^-inf = 0 below), so that full tiles, most of a packed row's steps, run no mask
      // instructions (predicated off inside the loop below, they still took issue slots).
      if (entry & 1) {
#pragma unroll
        for (int t = 0; t < kSTiles; ++t) {
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            const int4 visible = smem.visible[stage][score_q0 + 8 * t + quad_col + j];
            const VisibleKeys keys{visible.x, visible.y, visible.z};
#pragma unroll
            for (int r = 0; r < 2; ++r)
              if (!keys.contains(key_segment[r], key_position[r])) s[0][t][2 * r + j] = -INFINITY;
          }
        }
      }
      // P^T = 2^(s scale log2 e - lse log2 e), dS^T = P^T (dP^T - delta); packed as A fragments
      // (k16 step kk = query columns 16 kk .. 16 kk + 15).
      uint32_t p_frag[kScoreSteps][4];
      uint32_t ds_frag[kScoreSteps][4];
#pragma unroll
      for (int t = 0; t < kSTiles; ++t) {
        const float4 terms = smem.row_terms[stage][(score_q0 + 8 * t + quad_col) / 2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float lse_log2 = j == 0 ? terms.x : terms.y;
          const float delta = j == 0 ? terms.z : terms.w;
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float prob = fast_exp2(fmaf(s[0][t][2 * r + j], p.scale_log2, -lse_log2));
            s[0][t][2 * r + j] = prob;
            dp[t][2 * r + j] = prob * (dp[t][2 * r + j] - delta);
          }
        }
      }
#pragma unroll
      for (int kk = 0; kk < kScoreSteps; ++kk) {
        p_frag[kk][0] = Ops::pack(s[0][2 * kk][0], s[0][2 * kk][1]);
        p_frag[kk][1] = Ops::pack(s[0][2 * kk][2], s[0][2 * kk][3]);
        p_frag[kk][2] = Ops::pack(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
        p_frag[kk][3] = Ops::pack(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
        ds_frag[kk][0] = Ops::pack(dp[2 * kk][0], dp[2 * kk][1]);
        ds_frag[kk][1] = Ops::pack(dp[2 * kk][2], dp[2 * kk][3]);
        ds_frag[kk][2] = Ops::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
        ds_frag[kk][3] = Ops::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
      }

      // A fragments to shared memory (keys x queries, one 128-byte swizzled line per key): this
      // warpgroup's query chunks [score_q0 / 8, ...). stmatrix: frag[kk][2 half + r] is the 8 x 8
      // matrix of keys + 8 r, query chunk 2 kk + half of this warpgroup's queries; lane i addresses
      // row i % 8 of matrix i / 8.
      const auto store_tile = [&](Element* tile, const uint32_t(&frag)[kScoreSteps][4]) {
        const int matrix = lane / 8;
        const int key = key_row0 + lane % 8 + 8 * (matrix % 2);
#pragma unroll
        for (int kk = 0; kk < kScoreSteps; ++kk) {
          const int chunk = score_q0 / 8 + 2 * kk + matrix / 2;
          stmatrix_x4(frag[kk], tile + key * kSwizzleCols + (chunk ^ (key % 8)) * kChunkElems);
        }
      };
      // dS^T, the A of the dQ MMAs after the barrier below (both warpgroups' halves). head_dim 64
      // and 128: stored while the dV MMAs run, before the dK MMAs take ds_frag as their A operand
      // (reading it while they run would be undefined); two buffers: the barrier of step it + 1 is
      // only passed once both warpgroups have finished step it's dQ (and the persistent schedule's
      // next item starts only after K/V are loaded again, once both have finished this one).
      // head_dim 256: each warpgroup holds P^T and dS^T of its half of the queries, and the dK and
      // dV MMAs of both need all of them, so P^T (key_query[0]) and dS^T (key_query[1]) both go
      // through shared memory, one buffer each (no room for two): a barrier before the stores
      // waits until both warpgroups are done with the previous step's MMAs.
      Element* ds_tile = kDimSplit ? smem.key_query[1] : smem.key_query[it & 1];
      Element* p_tile = smem.key_query[0];  // head_dim 256

      // dV_w += P^T dO and dK_w += dS^T Q: B = dO, Q read MN-major (query rows are the k16 steps),
      // from this warpgroup's first dK/dV column; A from registers, or at head_dim 256 read
      // K-major from p_tile and ds_tile.
      const uint32_t kv_col_offset = (kv_col0 / kSwizzleCols) * kBlockBytesQ;
      const uint64_t desc_do_mn = advance_descriptor(
          smem_descriptor(smem.dout[stage], kBlockBytesQ, kSwizzleAtomBytes), kv_col_offset);
      const uint64_t desc_q_mn = advance_descriptor(
          smem_descriptor(smem.q[stage], kBlockBytesQ, kSwizzleAtomBytes), kv_col_offset);
      const uint64_t desc_p_rows = smem_descriptor(p_tile, kChunkBytes, kSwizzleAtomBytes);
      const uint64_t desc_ds_rows = smem_descriptor(ds_tile, kChunkBytes, kSwizzleAtomBytes);
      if constexpr (kDimSplit) {
        named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
        store_tile(p_tile, p_frag);
        store_tile(ds_tile, ds_frag);
        fence_proxy_async_shared();
        named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
      }
      // acc += A B over the tile's 64 queries (the k16 steps): A = frag, or at 256 read from
      // desc_a_rows; B (dO or Q) read MN-major from desc_b_mn.
      const auto add_query_mmas = [&](float(&acc)[kHTiles][4],
                                      const uint32_t(&frag)[kScoreSteps][4], uint64_t desc_a_rows,
                                      uint64_t desc_b_mn) {
#pragma unroll
        for (int kk = 0; kk < kQSteps; ++kk) {
          const uint64_t desc_b = advance_descriptor(desc_b_mn, kk * kRowStepBytes);
          if constexpr (kDimSplit) {
            MmaKV::template ss<1>(acc, advance_descriptor(desc_a_rows, kk * kStepBytes), desc_b,
                                  true);
          } else {
            MmaKV::template rs<1>(acc, frag[kk], desc_b, true);
          }
        }
      };
      fence_accumulators(acc_dv);
      fence_accumulators(acc_dk);
      wgmma_fence();
      add_query_mmas(acc_dv, p_frag, desc_p_rows, desc_do_mn);
      if constexpr (!kDimSplit) store_tile(ds_tile, ds_frag);
      add_query_mmas(acc_dk, ds_frag, desc_ds_rows, desc_q_mn);
      wgmma_commit();

      // dS^T in place for the dQ MMAs (the async proxy): at head_dim 64 each warpgroup reads only
      // its own keys' lines, written by its own warps, so it waits for them alone and the two
      // warpgroups drift apart (one's P^T and dS^T beside the other's MMAs); at 128 for both (at
      // 256 the barrier above did).
      if constexpr (!kDimSplit) {
        fence_proxy_async_shared();
        if constexpr (kDqByKeys) {
          named_barrier_sync(NamedBarrier(int(NamedBarrier::kWarpgroup0) + warpgroup),
                             kWarpgroupThreads);
        } else {
          named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
        }
      }

      const int next_index = tile_index + 1 == tile_count ? 0 : tile_index + 1;
      const int next_entry = it + 1 < steps ? tile_list[next_index] : 0;

      // This warpgroup's dQ part = dS K: A = dS (queries x keys) read MN-major from dS^T, B = K
      // (desc_k_cols) read MN-major; the keys are the k16 steps.
      float dq[kQTilesHalf][4];
      const uint64_t desc_ds = advance_descriptor(
          smem_descriptor(ds_tile, kSwizzleAtomBytes, kSwizzleAtomBytes), dq_key_offset);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kDqKeySteps; ++kk)
        MmaDq::template ss<1, 1>(dq, advance_descriptor(desc_ds, kk * kRowStepBytes),
                                 advance_descriptor(desc_k_cols, kk * kRowStepBytes), kk > 0);
      wgmma_commit();
      if constexpr (kScoresAhead) {
        // On the last step an S^T of this step's tile again, unused: a branch around the issue
        // would make ptxas wait for every MMA at its join (C7517).
        wgmma_wait<1>();  // dV and dK: P^T and dS^T are free
        fence_accumulators(acc_dv);
        fence_accumulators(acc_dk);
        issue_scores(it + 1 < steps ? it + 1 : it, true, false);
        wgmma_wait<1>();  // dQ
      } else {
        wgmma_wait<0>();
      }
      fence_accumulators(acc_dv);
      fence_accumulators(acc_dk);
      fence_accumulators(dq);
      // Q, dO and the row vectors done. Every thread arrives: an arrival releases only its own
      // reads of the row vectors, which the producer overwrites next (one arrival per warp after
      // __syncwarp is flagged by racecheck). The last step's unused S^T still reads its Q: that
      // stage is released after the loop (a wait here, in a branch, would make ptxas wait for
      // every MMA at its join). kDqInStage: released by release_staged.
      if (!kDqInStage && (!kScoresAhead || it + 1 < steps)) mbarrier_arrive(&smem.q_empty[stage]);

      // dq[query, head, dq_col0 ...) += scale dQ part: this warp's rows 16 (warp % 4) .. + 15.
      if constexpr (kDqTiles) {
        if (lane == 0) bulk_wait_group<0, true>();  // the previous step's rows have been read
        __syncwarp();
        stage_grad_rows(dq_stage, dq, p.scale, quad_row, quad_col);
        staged_rows = DqRows{q0 + 16 * warp_in_group, head};  // added during the next S^T, dP^T
      } else if constexpr (kDqInStage) {
        // Both warpgroups' MMAs have read this stage's Q and dO.
        named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
        float* const in_stage =
            reinterpret_cast<float*>(warpgroup == 0 ? smem.q[stage] : smem.dout[stage]) +
            warp_in_group * (kGradBoxRows * Traits::kDqCols);
        stage_grad_rows(in_stage, dq, p.scale, quad_row, quad_col);
        reduce_staged_dq(in_stage, Traits::kDqCols / kGradBoxCols,
                         DqRows{q0 + 16 * warp_in_group, head});
      } else {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int query = q0 + 16 * warp_in_group + quad_row + 8 * r;
          if (query >= p.seqlen_q) continue;
#pragma unroll
          for (int t = 0; t < kQTilesHalf; ++t)
            atomicAdd(reinterpret_cast<float2*>(dq_row(query, head) + 8 * t + quad_col),
                      make_float2(p.scale * dq[t][2 * r], p.scale * dq[t][2 * r + 1]));
        }
      }
      entry = next_entry;
      head += next_index == 0 ? 1 : 0;
      tile_index = next_index;
    }
    if constexpr (kScoresAhead) {
      wgmma_wait<0>();  // the unused S^T
      mbarrier_arrive(&smem.q_empty[(step + steps - 1) % kStages]);
    }
    if constexpr (kDqInStage) release_staged((step + steps - 1) % kStages);
    if constexpr (kDqTiles) add_staged_dq();  // the last step's rows
    if constexpr (kTiles) {
      // dK += scale dK_tile, dV += dV_tile: this warp's 16 keys (over its warpgroup's columns)
      // staged in the K / V tiles and the Q / dO stages (free once both warpgroups are past their
      // last MMAs and, at 256, the reductions of the last dQ have read their stage), added by
      // tensor reductions of [16][32] boxes.
      constexpr int kWarpStageFloats = kGradBoxRows * Traits::kGroupCols;
      static_assert(offsetof(Smem, v) == offsetof(Smem, k) + sizeof(Smem::k) &&
                    offsetof(Smem, dout) == offsetof(Smem, q) + sizeof(Smem::q) &&
                    sizeof(Smem::k) + sizeof(Smem::v) >= kConsumerWarps * kWarpStageFloats * 4 &&
                    sizeof(Smem::q) + sizeof(Smem::dout) >= kConsumerWarps * kWarpStageFloats * 4);
      named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
      float* const dk_stage = reinterpret_cast<float*>(smem.k) + warp * kWarpStageFloats;
      float* const dv_stage = reinterpret_cast<float*>(&smem.q[0][0]) + warp * kWarpStageFloats;
      stage_grad_rows(dk_stage, acc_dk, p.scale, quad_row, quad_col);
      stage_grad_rows(dv_stage, acc_dv, 1.0f, quad_row, quad_col);
      fence_proxy_async_shared();
      __syncwarp();
      if (lane == 0) {
        constexpr int kBoxes = Traits::kGroupCols / kGradBoxCols;
        reduce_grad_boxes(&maps.dk, dk_stage, kBoxes, kv_col0, h_kv, n0 + key_row0, batch);
        reduce_grad_boxes(&maps.dv, dv_stage, kBoxes, kv_col0, h_kv, n0 + key_row0, batch);
        bulk_commit_group();
        bulk_wait_group<0, false>();  // shared memory stays until the adds are done
      }
    } else {
      // dK += scale dK_tile, dV += dV_tile (fp32): atomics when several CTAs share the key tile.
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = n0 + key_row0 + quad_row + 8 * r;
        if (key >= p.seqlen_k) continue;
        const int64_t row_offset = (int64_t(batch) * p.seqlen_k + key) * p.kv_token_stride +
                                   int64_t(h_kv) * kHeadDim + kv_col0 + quad_col;
#pragma unroll
        for (int t = 0; t < kHTiles; ++t) {
          float2* dk = reinterpret_cast<float2*>(p.dk + row_offset + 8 * t);
          float2* dv = reinterpret_cast<float2*>(p.dv + row_offset + 8 * t);
          const float2 dk_add = make_float2(__fmul_rn(p.scale, acc_dk[t][2 * r]),
                                            __fmul_rn(p.scale, acc_dk[t][2 * r + 1]));
          const float2 dv_add = make_float2(acc_dv[t][2 * r], acc_dv[t][2 * r + 1]);
          bwd::add_pair(dk, dk_add, p.head_splits > 1);
          bwd::add_pair(dv, dv_add, p.head_splits > 1);
        }
      }
    }
  };

  if constexpr (!kPersistent) {
    process(grid_work, 0, 0);
  } else {
    int step = 0;    // (query head, query tile) pairs consumed by this CTA before the item
    int loaded = 0;  // items with steps before this one
    for (int n = 0;; ++n) {
      const BackwardWork work = smem.work.take(n);
      if (work.steps < 0) break;
      if (work.steps == 0) continue;  // no visible pair: nothing loaded, nothing to add
      process(work, step, loaded & 1);
      // The epilogue's staging (generic writes to K, V, Q and dO) comes before the next item's
      // TMA writes there; with tile adds lane 0 has waited for the reductions to read them.
      fence_proxy_async_shared();
      mbarrier_arrive(&smem.kv_empty);
      step += work.steps;
      ++loaded;
    }
  }
#else
  __trap();  // built without sm_90a code: the launcher never selects this kernel
#endif
}

template <class Element, int kHeadDim>
void launch_backward_wgmma(BackwardParams params, const BackwardTensorMaps& maps,
                           const KernelOptions& options, cudaStream_t stream) {
  using Traits = BackwardWgmmaTraits<Element, kHeadDim>;
  const GradientAdd grad_add = options.backward_grad_add;
  params.accumulate_dq = true;

  BackwardTensorMaps all_maps = maps;
  // dq, dk and dv, which GradAdd::kTiles adds by tensor reductions.
  auto grad_map = [&](CUtensorMap* map, float* grad, int seqlen, int num_heads, int64_t stride) {
    return encode_fp32_tile_map(map, grad, params.batch, seqlen, num_heads, Traits::kHeadDim,
                                stride, kGradBoxRows, kGradBoxCols);
  };
  const bool tile_map = grad_map(&all_maps.dq, params.dq, params.seqlen_q, params.num_heads_q,
                                 params.q_token_stride) &&
                        grad_map(&all_maps.dk, params.dk, params.seqlen_k, params.num_heads_kv,
                                 params.kv_token_stride) &&
                        grad_map(&all_maps.dv, params.dv, params.seqlen_k, params.num_heads_kv,
                                 params.kv_token_stride);
  RINGPACK_CHECK(tile_map || grad_add != GradientAdd::kTma,
                 "--backward-grad-add tma: TMA cannot describe dq, dk or dv (16-byte aligned "
                 "bases, rows a multiple of 16 bytes apart); use --backward-grad-add auto");
  const bool tiles = tile_map && grad_add != GradientAdd::kAtomics;
  const bool persistent = backward_persistent(options);
  // The kernel for (grad add, schedule).
  auto pick = [&](auto add) {
    constexpr GradAdd kAddValue = decltype(add)::value;
    return persistent ? backward_wgmma_kernel<Traits, kAddValue, true>
                      : backward_wgmma_kernel<Traits, kAddValue, false>;
  };
  auto kernel = tiles ? pick(std::integral_constant<GradAdd, GradAdd::kTiles>{})
                      : pick(std::integral_constant<GradAdd, GradAdd::kAtomics>{});
  TilePlan plan = plan_step_tiles(params, Traits::kBlockM, Traits::kBlockN,
                                  /*lists_of_queries=*/true, SlotOrder::kFromIndex, stream);
  constexpr int kSmemBytes = int(sizeof(BackwardWgmmaSmem<Traits>));
  RINGPACK_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const int num_x = params.batch * params.num_tiles_k;
  const int num_y = params.num_heads_kv * params.head_splits;
  if (persistent) {
    const int grid =
        persistent_grid(kernel, Traits::kNumThreads, kSmemBytes, num_x * num_y, options.sm_margin);
    kernel<<<grid, Traits::kNumThreads, kSmemBytes, stream>>>(params, all_maps);
  } else {
    kernel<<<dim3(num_x, num_y), Traits::kNumThreads, kSmemBytes, stream>>>(params, all_maps);
  }
  RINGPACK_CHECK_LAUNCH();
  plan.release(stream);
}

}  // namespace ringpack::cuda
