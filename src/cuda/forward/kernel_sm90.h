// The forward attention kernel for Hopper (sm_90a): warp-specialised, TMA-fed, wgmma main loop,
// for packed rows in any token order. Device code; included only by
// src/cuda/instances/forward_*_sm90.cu.
//
// Same contract, tile lists, mask policy, softmax and epilogues as the mma.sync kernel
// (forward/kernel_sm80.h); the main loop differs:
//   - Two schedules (KernelOptions::forward_schedule). Grid: one CTA per work item (query head,
//     query tile), launched in descending row order (descending_tile). Persistent: one CTA per SM
//     (fewer with KernelOptions::sm_margin), each taking work items in the same order until none is
//     left: the first from its index, the next from a global counter that its producer claims one
//     item ahead. The K/V pipeline and its barrier phases run on across items, so the next item's
//     first K/V tile loads while the consumers finish the current item.
//   - CTA = 2 consumer warpgroups + 1 producer warpgroup (setmaxnreg moves its registers to the
//     consumers). Warpgroup w < 2 owns query rows [64 w, 64 w + 64) of a 128-row tile; both read
//     the same K/V tiles.
//   - One producer warp walks the tile list and fills two K and two V stages with TMA copies
//     (tensor maps with the 128-byte swizzle of common/wgmma.h), plus the keys' ids and positions
//     for partial tiles; full/empty mbarriers per stage hand each stage to the consumers and back,
//     so the warpgroups run decoupled from each other and from the loads. A consumer warp
//     releases a stage by one lane's arrival; the ids, which every consumer thread reads, come
//     back by each thread's own arrival (release_k), an order compute-sanitizer's racecheck
//     follows.
//   - S = Q K^T: 64 x 128 per warpgroup, head_dim / 16 wgmma with Q and K from shared memory;
//     O += P V with P in registers (the S accumulator layout is the A fragment layout once packed
//     to 16 bits) and V read MN-major from the same tile layout as K.
//   - Software pipeline inside each warpgroup: S_{j+1} is issued together with P_j V_j, and its
//     softmax runs on the CUDA cores while P_j V_j occupies the tensor cores (in the grid kernel
//     ptxas moves the exponentials after P_j V_j's wait: softmax_before_wait); O is rescaled
//     once P_j V_j has landed.
//   - Ping-pong (KernelOptions::forward_overlap): the two warpgroups also take turns to issue
//     their MMAs, so one's softmax runs while the other's MMAs occupy the tensor cores.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/common/cuda_check.h"
#include "cuda/common/mma_sync.h"
#include "cuda/common/persistent.h"
#include "cuda/common/tma.h"
#include "cuda/common/wgmma.h"
#include "cuda/common/work_ring.h"
#include "cuda/forward/epilogue.h"
#include "cuda/forward/instances.h"
#include "cuda/forward/params.h"
#include "cuda/forward/softmax.h"
#include "cuda/forward/traits.h"

namespace ringpack::cuda {

// One work item as the persistent producer hands it to the consumers: query head `head` (kv head
// `kv_head`) of the query tile that starts at row q_begin of batch row `batch`, and its listed key
// tiles; head < 0: no work is left.
struct ForwardWork {
  const int32_t* tile_list;
  int head;
  int kv_head;
  int batch;
  int q_begin;
  int tile_count;
};

// Shared memory of one CTA; tiles first, each 1024-byte aligned for the swizzle.
template <class Traits>
struct ForwardWgmmaSmem {
  using Element = typename Traits::Element;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kBlockN = Traits::kBlockN;
  alignas(1024) Element q[Traits::kQElems];            // [kHeadDim / 64][kBlockM][64]
  alignas(1024) Element k[kStages][Traits::kKVElems];  // [kHeadDim / 64][kBlockN][64] each
  alignas(1024) Element v[kStages][Traits::kKVElems];  // [kHeadDim / 64][kBlockN][64] each
  int32_t segment_ids_k[kStages][kBlockN];             // keys' ids / positions, partial tiles only
  int32_t positions_k[kStages][kBlockN];
  uint64_t q_full;            // Q landed (persistent: no bytes for an item without key tiles)
  uint64_t k_full[kStages];   // K (and ids/positions) of the stage's tile landed
  uint64_t k_empty[kStages];  // every consumer warp is done with the stage's K
  uint64_t v_full[kStages];
  uint64_t v_empty[kStages];
  // Persistent schedule only.
  uint64_t q_empty;  // every consumer thread is done with Q (its MMAs, and the epilogue
                     // where it stages O in Q's tile)
  // The CTA's work items. No empty barrier: the producer writes item n + 2 where item n was only
  // after q_empty has completed for item n (it waits for that before item n + 1's Q), so after
  // every consumer thread has read item n.
  WorkRing<ForwardWork, false> work;
};

// The persistent schedule at head_dim 64 and 128, where shared memory has room for it: O staged
// apart from Q (the epilogue's own rows per warp), so the next item's Q loads as soon as the
// current item's MMAs are done, while the epilogue runs.
template <class Traits>
struct ForwardWgmmaSmemWithO : ForwardWgmmaSmem<Traits> {
  alignas(16) typename Traits::Element o[Traits::kQElems];
};

template <class Traits, bool kPersistent>
constexpr bool forward_stages_o_apart() {
  return kPersistent && Traits::kHeadDim <= 128;
}

template <class Traits, bool kPersistent>
using ForwardWgmmaSmemFor =
    std::conditional_t<forward_stages_o_apart<Traits, kPersistent>(), ForwardWgmmaSmemWithO<Traits>,
                       ForwardWgmmaSmem<Traits>>;

template <class Traits, bool kMerge, bool kPersistent, bool kPingPong>
__global__ void __launch_bounds__(Traits::kNumThreads, 1)
    forward_wgmma_kernel(const __grid_constant__ ForwardParams params,
                         const __grid_constant__ ForwardTensorMaps maps) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Element = typename Traits::Element;
  using Ops = ElementOps<Element>;
  using Smem = ForwardWgmmaSmemFor<Traits, kPersistent>;
  constexpr bool kOApart = forward_stages_o_apart<Traits, kPersistent>();
  using Registers = ForwardWgmmaRegisters<Traits::kHeadDim, kPersistent>;
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr int kBlockM = Traits::kBlockM;
  constexpr int kBlockN = Traits::kBlockN;
  constexpr int kStages = Traits::kStages;
  constexpr int kSTiles = kBlockN / 8;                    // n8 accumulator tiles of S
  constexpr int kOTiles = kHeadDim / 8;                   // n8 accumulator tiles of O
  constexpr int kDSteps = kHeadDim / kWgmmaK;             // k16 steps of Q K^T
  constexpr int kNSteps = kBlockN / kWgmmaK;              // k16 steps of P V
  constexpr int kStepsPerBlock = kSwizzleCols / kWgmmaK;  // k16 steps per 64-column block: 4
  constexpr int kColBlocks = kHeadDim / kSwizzleCols;     // TMA boxes per tile
  constexpr int kRows = 2;                                // query rows per thread: g and g + 8
  constexpr int kConsumerWarps = Traits::kNumConsumerThreads / kWarpSize;
  static_assert(kStages == 2, "one key-ids barrier per K stage (NamedBarrier::kKeyIds0, 1)");
  // The key-ids barriers' count: every consumer thread and the producer warp (release_k).
  constexpr int kKeyIdsThreads = Traits::kNumConsumerThreads + kWarpSize;
  const auto key_ids_barrier = [](int stage) {
    return NamedBarrier(int(NamedBarrier::kKeyIds0) + stage);
  };
  constexpr uint32_t kTileBytes = Traits::kKVElems * sizeof(Element);
  using MmaS = WgmmaOps<Element, kBlockN>;
  using MmaO = WgmmaOps<Element, kHeadDim>;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  Smem& smem = *reinterpret_cast<Smem*>(smem_raw);

  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  // Work item w (persistent schedule): query head w % num_heads_q of the (w / num_heads_q)-th
  // query tile from the end of the batch (descending_tile), so the heads of one tile run side by
  // side and share its K/V in L2, as the grid schedule's x = head, y = the tile from the end.
  // Descending row order takes each document's query tiles heaviest first (under the causal mask
  // a tile walks at least the key tiles of the tile before it in its document), and the few
  // tiles of a wave (132 CTAs over 32 heads) are neighbours that share their documents' K/V.
  // Against the tile plan's heaviest-first order, which spreads a wave's tiles over documents:
  // 0.92x / 0.98x / 0.99x the time on packed-64k at head_dim 128 / 64 / 256, 0.99x / 1.02x /
  // 0.97x on packed-16k; on the dense row the two orders are one. A row whose heaviest tiles sit
  // at its start (a long document's end there) runs them last: a tail of one tile's walk at most
  // (docs/cuda_kernels.md, "Session 30").
  const int num_slots = params.batch * params.num_tiles_q;
  const int num_work = params.num_heads_q * num_slots;
  const auto descending_tile = [&](int rank) { return num_slots - 1 - rank; };
  auto decode = [&](int w) {
    ForwardWork work{nullptr, -1, 0, 0, 0, 0};
    if (w >= num_work) return work;
    work.head = w % params.num_heads_q;
    work.kv_head = work.head / params.heads_per_kv;
    const int slot = descending_tile(w / params.num_heads_q);
    work.batch = slot / params.num_tiles_q;
    work.q_begin = (slot % params.num_tiles_q) * kBlockM;
    work.tile_count = params.tile_counts[slot];
    work.tile_list = params.tile_lists + int64_t(slot) * params.num_tiles_k;
    return work;
  };
  // The grid schedule's one item.
  const int head = blockIdx.x;
  const int slot = descending_tile(int(blockIdx.y));  // gridDim.y == num_slots
  const int batch = slot / params.num_tiles_q;
  const int q_begin = (slot % params.num_tiles_q) * kBlockM;
  const int kv_head = head / params.heads_per_kv;
  const int32_t* tile_list = params.tile_lists + int64_t(slot) * params.num_tiles_k;
  const int tile_count = params.tile_counts[slot];

  if (threadIdx.x == 0) {
    mbarrier_init(&smem.q_full, 1);
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(&smem.k_full[s], kWarpSize);  // every producer lane (ids/positions)
      // Ping-pong: every consumer thread arrives for itself (release_k).
      mbarrier_init(&smem.k_empty[s], kPingPong ? Traits::kNumConsumerThreads : kConsumerWarps);
      mbarrier_init(&smem.v_full[s], 1);
      mbarrier_init(&smem.v_empty[s], kConsumerWarps);
    }
    if constexpr (kPersistent) {
      mbarrier_init(&smem.q_empty, Traits::kNumConsumerThreads);
      smem.work.init(Traits::kNumConsumerThreads);
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x >= Traits::kNumConsumerThreads) {
    // ---- producer warpgroup: gives its registers to the consumers; its first warp loads, per
    // work item, Q and K (+ ids/positions) and V of each listed key tile ----
    set_max_registers_dec<Registers::kProducer>();
    if (warp != kConsumerWarps) return;
    // Q of an item with key tiles (q_row0: its first row in the [batch * seqlen_q] map).
    auto load_q = [&](int q_head, int q_row0) {
      mbarrier_arrive_expect_bytes(&smem.q_full, Traits::kQElems * sizeof(Element));
      for (int b = 0; b < kColBlocks; ++b)
        tma_load_3d(smem.q + b * kBlockM * kSwizzleCols, &maps.q, b * kSwizzleCols, q_head, q_row0,
                    &smem.q_full);
    };
    // The CTA's step-th K/V tile, listed as `entry`, of kv head `kv` in batch row k_row0.
    auto load_kv = [&](int step, int entry, int kv, int64_t k_row0) {
      const int stage = step % kStages;
      const uint32_t free_parity = ((step / kStages) & 1) ^ 1;  // first use: passes at once
      const int k_begin = (entry >> 1) * kBlockN;
      mbarrier_wait(&smem.k_empty[stage], free_parity);
      // Without ping-pong, tile step - kStages's ids and positions come back by the stage's
      // key-ids barrier (release_k); for the walk's last two tiles consumer warp 0 arrives in
      // this warp's place (complete_key_ids).
      if (!kPingPong && step >= kStages) named_barrier_sync(key_ids_barrier(stage), kKeyIdsThreads);
      if (lane == 0) {
        mbarrier_expect_bytes(&smem.k_full[stage], kTileBytes);
        for (int b = 0; b < kColBlocks; ++b)
          tma_load_3d(smem.k[stage] + b * kBlockN * kSwizzleCols, &maps.k, b * kSwizzleCols, kv,
                      int(k_row0 + k_begin), &smem.k_full[stage]);
      }
      if (entry & 1) {  // partial tile: keys past seqlen_k read as padding (id 0: never visible)
        const int32_t* seg_k = params.segment_ids_k + k_row0;
        const int32_t* pos_k = params.positions_k + k_row0;
        for (int i = lane; i < kBlockN; i += kWarpSize) {
          const bool in_range = k_begin + i < params.seqlen_k;
          smem.segment_ids_k[stage][i] = in_range ? seg_k[k_begin + i] : 0;
          smem.positions_k[stage][i] = in_range ? pos_k[k_begin + i] : 0;
        }
      }
      mbarrier_arrive(&smem.k_full[stage]);  // after this lane's ids/positions are written

      mbarrier_wait(&smem.v_empty[stage], free_parity);
      if (lane == 0) {
        mbarrier_arrive_expect_bytes(&smem.v_full[stage], kTileBytes);
        for (int b = 0; b < kColBlocks; ++b)
          tma_load_3d(smem.v[stage] + b * kBlockN * kSwizzleCols, &maps.v, b * kSwizzleCols, kv,
                      int(k_row0 + k_begin), &smem.v_full[stage]);
      }
    };

    if constexpr (!kPersistent) {
      const int64_t q_row0 = int64_t(batch) * params.seqlen_q + q_begin;
      const int64_t k_row0 = int64_t(batch) * params.seqlen_k;
      if (tile_count > 0 && lane == 0) load_q(head, int(q_row0));
      for (int it = 0; it < tile_count; ++it) load_kv(it, tile_list[it], kv_head, k_row0);
    } else {
      int w = blockIdx.x;
      int step = 0;  // K/V tiles loaded by this CTA
      for (int n = 0;; ++n) {
        // The item stays in shared memory, and the loop reads it there: the producer has few
        // registers (ForwardWgmmaRegisters).
        const ForwardWork& work = smem.work.publish(n, lane, [&] { return decode(w); });
        if (work.head < 0) break;
        // The next item, claimed now: the counter's latency hides behind this item's loads.
        int next = 0;
        if (lane == 0) next = claim_next_work(params.work_counter);
        // Q once the consumers are done with the previous item's: after this item's first K/V
        // tile, which may load while they still finish that item.
        auto hand_over_q = [&] {
          mbarrier_wait(&smem.q_empty, (n & 1) ^ 1);
          if (lane != 0) return;
          if (work.tile_count == 0) {
            mbarrier_arrive(&smem.q_full);  // no Q: the consumers write empty rows
          } else {
            load_q(work.head, work.batch * params.seqlen_q + work.q_begin);
          }
        };
        if (work.tile_count == 0) hand_over_q();
        for (int it = 0; it < work.tile_count; ++it, ++step) {
          load_kv(step, work.tile_list[it], work.kv_head, int64_t(work.batch) * params.seqlen_k);
          if (it == 0) hand_over_q();
        }
        w = __shfl_sync(kFullMask, next, 0);
      }
    }
    return;
  }

  // ---- consumer warpgroups ----
  set_max_registers_inc<Registers::kConsumer>();
  const int warpgroup = warp_uniform(threadIdx.x / kWarpgroupThreads);
  const int quad_row = lane / 4;
  const int quad_col = (lane % 4) * 2;
  const int warp_row0 = warp * Traits::kRowsPerWarp;  // = 64 warpgroup + 16 (warp % 4)

  // Ping-pong: a warpgroup issues its MMAs of a tile (S_0; S_{j+1} with P_j V_j; the last P V) in
  // its turn only, and passes the turn to the other warpgroup as soon as they are issued. Turn
  // barrier w holds warpgroup w's wait and the other's arrival. Warpgroup 0 gives itself the
  // first turn here and takes the turn that warpgroup 1 passes last at the end, so both barriers
  // end balanced. Both warpgroups walk the same tiles, so their turns alternate to the end.
  const auto turn_barrier = [](int w) { return NamedBarrier(int(NamedBarrier::kTurn0) + w); };
  auto begin_turn = [&] {
    if constexpr (kPingPong)
      named_barrier_sync(turn_barrier(warpgroup), Traits::kNumConsumerThreads);
  };
  auto end_turn = [&] {
    if constexpr (kPingPong)
      named_barrier_arrive(turn_barrier(1 - warpgroup), Traits::kNumConsumerThreads);
  };
  if constexpr (kPingPong) {
    if (warpgroup == 0) named_barrier_arrive(NamedBarrier::kTurn0, Traits::kNumConsumerThreads);
  }

  // The key-ids barriers of the walk's last two tiles (`steps` tiles in all), which the producer
  // never syncs on: warp 0 arrives in its place, so each barrier ends balanced. (A sync there by
  // the persistent producer made ptxas spill the consumers' registers at head_dim 128 and 256.)
  auto complete_key_ids = [&](int steps) {
    if (kPingPong || warp != 0) return;
    if (steps >= 2) named_barrier_arrive(key_ids_barrier((steps - 2) % kStages), kKeyIdsThreads);
    if (steps >= 1) named_barrier_arrive(key_ids_barrier((steps - 1) % kStages), kKeyIdsThreads);
  };

  // The visible-key interval of this thread's two query rows (rows past seqlen_q: padding).
  auto find_visible_keys = [&](VisibleKeys(&keys)[kRows], int item_batch, int item_q_begin) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int row = item_q_begin + warp_row0 + quad_row + 8 * i;
      const int64_t index = int64_t(item_batch) * params.seqlen_q + row;
      const bool valid = row < params.seqlen_q;
      keys[i] = visible_keys(valid ? params.segment_ids_q[index] : 0,
                             valid ? params.positions_q[index] : 0, params.mask);
    }
  };

  // Descriptors (common/wgmma.h). Q: this warpgroup's 64 rows, K-major; K: K-major; V: MN-major.
  constexpr uint32_t kBlockBytesQ = kBlockM * kSwizzleLineBytes;   // one 64-column block of Q
  constexpr uint32_t kBlockBytesKV = kBlockN * kSwizzleLineBytes;  // one 64-column block of K / V
  constexpr uint32_t kStepBytes = kWgmmaK * sizeof(Element);       // one k16 step along a line: 32
  const uint64_t desc_q =
      smem_descriptor(smem.q + warpgroup * 64 * kSwizzleCols, kChunkBytes, kSwizzleAtomBytes);

  // Issues S = Q K^T (64 x kBlockN per warpgroup, fp32) for the K tile in `stage`.
  auto issue_scores = [&](float(&scores)[1][kSTiles][4], int stage) {
    const uint64_t desc_k = smem_descriptor(smem.k[stage], kChunkBytes, kSwizzleAtomBytes);
#pragma unroll
    for (int d = 0; d < kDSteps; ++d) {
      const uint32_t in_block = (d % kStepsPerBlock) * kStepBytes;
      MmaS::template ss<0>(
          scores[0], advance_descriptor(desc_q, (d / kStepsPerBlock) * kBlockBytesQ + in_block),
          advance_descriptor(desc_k, (d / kStepsPerBlock) * kBlockBytesKV + in_block), d > 0);
    }
  };
  // P as A fragments: two n8 S tiles = one k16 A tile (rows g, g + 8; columns c, c + 8).
  auto pack_probs = [&](uint32_t(&probs)[kNSteps][4], const float(&scores)[1][kSTiles][4]) {
#pragma unroll
    for (int kk = 0; kk < kNSteps; ++kk) {
      probs[kk][0] = Ops::pack(scores[0][2 * kk][0], scores[0][2 * kk][1]);
      probs[kk][1] = Ops::pack(scores[0][2 * kk][2], scores[0][2 * kk][3]);
      probs[kk][2] = Ops::pack(scores[0][2 * kk + 1][0], scores[0][2 * kk + 1][1]);
      probs[kk][3] = Ops::pack(scores[0][2 * kk + 1][2], scores[0][2 * kk + 1][3]);
    }
  };
  // ptxas schedules the softmax's exponentials (and, in the persistent kernel, its row maxima)
  // after the wgmma wait that follows them in the source, so they run after P_j V_j instead of
  // beside it. A never-taken, warp-uniform branch on the row sums, which every exponential
  // feeds, ends the basic block before the wait and keeps them there. Persistent schedule only:
  // the grid kernel compiled with it runs out of registers at head_dim 128 and 256, and ptxas
  // serialises its wgmma (docs/benchmarks.md, "Session 18").
  auto softmax_before_wait = [](const float(&sums)[kRows]) {
    if (__any_sync(kFullMask, sums[0] + sums[1] < 0.0f)) __trap();  // sums of 2^x: never < 0
  };
  // This warp is done with a stage (its reads and its warpgroup's wgmma reads have finished).
  auto release = [&](uint64_t* empty) {
    __syncwarp();
    if (lane == 0) mbarrier_arrive(empty);
  };
  // This thread is done with K stage `stage`, its mask's reads of the stage's key ids included.
  // Its warp's one arrival on k_empty orders the warpgroup's MMA reads, but racecheck does not
  // follow it for the other lanes' reads of the ids (it reported the producer's next write of
  // them), so each thread also arrives on the stage's key-ids barrier. In ping-pong racecheck
  // did not follow that either (perhaps because a thread's arrival there is still pending when it
  // waits on its turn barrier), so there every thread arrives on k_empty itself, which costs 3-6%
  // at head_dim 256 (docs/benchmarks.md, "Session 22").
  auto release_k = [&](int stage) {
    if constexpr (kPingPong) {
      mbarrier_arrive(&smem.k_empty[stage]);
    } else {
      release(&smem.k_empty[stage]);
      named_barrier_arrive(key_ids_barrier(stage), kKeyIdsThreads);
    }
  };

  // O, the row max and the row sums of one work item, whose listed tiles are the CTA's K/V tiles
  // `step`, `step` + 1, ... (the grid schedule: step = 0).
  auto attend = [&](float(&acc_o)[1][kOTiles][4], float(&row_max)[kRows], float(&row_sum)[kRows],
                    const VisibleKeys(&keys)[kRows], const int32_t* item_list, int item_count,
                    int step) {
    auto stage_of = [&](int it) { return (step + it) % kStages; };
    auto parity_of = [&](int it) { return uint32_t(((step + it) / kStages) & 1); };
    // Issues O += P V for listed tile `it` once its V has landed: V rows 16 kk .. 16 kk + 15 are
    // k16 step kk.
    auto issue_output = [&](const uint32_t(&probs)[kNSteps][4], int it) {
      const int stage = stage_of(it);
      mbarrier_wait(&smem.v_full[stage], parity_of(it));
      const uint64_t desc_v = smem_descriptor(smem.v[stage], kBlockBytesKV, kSwizzleAtomBytes);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kNSteps; ++kk)
        MmaO::template rs<1>(acc_o[0], probs[kk],
                             advance_descriptor(desc_v, kk * kWgmmaK * kSwizzleLineBytes), true);
      wgmma_commit();
    };
    // Partial tiles: rule (1) per element on the scores of the key tile in `stage`.
    auto mask_scores = [&](float(&scores)[1][kSTiles][4], int entry, int stage) {
      if (entry & 1)
        mask_partial_tile(scores, keys, smem.segment_ids_k[stage], smem.positions_k[stage],
                          quad_col);
    };

    if (item_count > 0) {
      float s[1][kSTiles][4];
      uint32_t p[kNSteps][4];
      float correction[kRows];
      const int first_entry = __ldg(item_list);  // before the waits, as in the loop below
      if constexpr (!kPersistent) mbarrier_wait(&smem.q_full, 0);
      const int first = stage_of(0);
      mbarrier_wait(&smem.k_full[first], parity_of(0));
      begin_turn();
      wgmma_fence();
      issue_scores(s, first);
      wgmma_commit();
      end_turn();
      wgmma_wait<0>();
      fence_accumulators(s[0]);
      mask_scores(s, first_entry, first);
      release_k(first);
      softmax_tile(s, row_max, row_sum, params.scale_log2, correction);  // O = 0: no rescale
      pack_probs(p, s);

      // The last tile is outside the loop so the body issues S_{it+1} unconditionally: a branch
      // around that issue makes ptxas serialise the wgmma pipeline (docs/cuda_kernels.md).
      for (int it = 0; it + 1 < item_count; ++it) {
        const int next = stage_of(it + 1);
        // The next tile's entry, read before the waits so that its latency hides behind them.
        // __ldg makes it a global load even where the list pointer came through shared memory
        // (the persistent schedule), where ptxas left a generic load after the wgmma wait.
        const int entry = __ldg(item_list + it + 1);
        fence_accumulators(acc_o[0]);
        mbarrier_wait(&smem.k_full[next], parity_of(it + 1));
        begin_turn();
        wgmma_fence();
        issue_scores(s, next);
        wgmma_commit();
        issue_output(p, it);
        end_turn();
        wgmma_wait<1>();  // S_{it+1} landed; P_it V_it may still run
        fence_accumulators(s[0]);
        mask_scores(s, entry, next);
        release_k(next);
        softmax_tile(s, row_max, row_sum, params.scale_log2, correction);
        if constexpr (kPersistent) softmax_before_wait(row_sum);
        wgmma_wait<0>();
        fence_accumulators(acc_o[0]);
        release(&smem.v_empty[stage_of(it)]);
        rescale_output(acc_o, correction);
        pack_probs(p, s);
      }
      begin_turn();
      issue_output(p, item_count - 1);
      end_turn();
      wgmma_wait<0>();
      fence_accumulators(acc_o[0]);
      release(&smem.v_empty[stage_of(item_count - 1)]);
    }
  };

  if constexpr (!kPersistent) {
    VisibleKeys keys[kRows];
    find_visible_keys(keys, batch, q_begin);
    float acc_o[1][kOTiles][4] = {};
    float row_max[kRows] = {-INFINITY, -INFINITY};  // running max of raw scores <q, k>
    float row_sum[kRows] = {0.0f, 0.0f};            // this thread's partial of l
    attend(acc_o, row_max, row_sum, keys, tile_list, tile_count, 0);
    // Direct: staged through Q's shared memory in the epilogue's own layout, so both
    // warpgroups' MMAs must have finished reading Q (a barrier of the consumer threads only).
    named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
    forward_epilogue<Traits, kMerge>(params, acc_o, row_max, row_sum, smem.q + warp_row0 * kHeadDim,
                                     WarpRows{batch, head, q_begin + warp_row0, lane});
    complete_key_ids(tile_count);
  } else {
    int step = 0;  // K/V tiles consumed by this CTA before the current item
    for (int n = 0;; ++n) {
      const ForwardWork work = smem.work.take(n);
      if (work.head < 0) break;
      VisibleKeys keys[kRows];
      find_visible_keys(keys, work.batch, work.q_begin);
      float acc_o[1][kOTiles][4] = {};
      float row_max[kRows] = {-INFINITY, -INFINITY};
      float row_sum[kRows] = {0.0f, 0.0f};
      mbarrier_wait(&smem.q_full, n & 1);
      attend(acc_o, row_max, row_sum, keys, work.tile_list, work.tile_count, step);
      step += work.tile_count;
      const WarpRows rows{work.batch, work.head, work.q_begin + warp_row0, lane};
      if constexpr (kOApart) {
        // This thread's MMAs are done (attend ends with a wgmma wait): the next item's Q may load
        // during the epilogue. The warp's staging rows are its own; its lanes all left the
        // previous item's epilogue before any writes them again.
        mbarrier_arrive(&smem.q_empty);
        __syncwarp();
        forward_epilogue<Traits, kMerge>(params, acc_o, row_max, row_sum,
                                         smem.o + warp_row0 * kHeadDim, rows);
      } else {
        named_barrier_sync(NamedBarrier::kConsumers, Traits::kNumConsumerThreads);
        forward_epilogue<Traits, kMerge>(params, acc_o, row_max, row_sum,
                                         smem.q + warp_row0 * kHeadDim, rows);
        // The staging's accesses to Q's tile come before the next item's TMA writes there (the
        // async proxy), which wait for every consumer thread's arrival.
        fence_proxy_async_shared();
        mbarrier_arrive(&smem.q_empty);
      }
    }
    complete_key_ids(step);
  }
  if constexpr (kPingPong) {
    if (warpgroup == 0) named_barrier_sync(NamedBarrier::kTurn0, Traits::kNumConsumerThreads);
  }
#else
  __trap();  // built without sm_90a code: the launcher never selects this kernel
#endif
}

template <class Traits, bool kMerge>
void launch_forward_wgmma(const ForwardParams& params, const ForwardTensorMaps& maps,
                          const KernelOptions& options, cudaStream_t stream) {
  const bool persistent = forward_persistent(options, Traits::kHeadDim);
  const bool pingpong = forward_pingpong(options, Traits::kHeadDim);
  auto run = [&](auto kernel, auto persistent) {
    constexpr int kSmemBytes = int(sizeof(ForwardWgmmaSmemFor<Traits, persistent.value>));
    RINGPACK_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    if (persistent) {
      const int num_work = params.num_heads_q * params.batch * params.num_tiles_q;
      const int grid =
          persistent_grid(kernel, Traits::kNumThreads, kSmemBytes, num_work, options.sm_margin);
      kernel<<<grid, Traits::kNumThreads, kSmemBytes, stream>>>(params, maps);
    } else {
      const dim3 grid(params.num_heads_q, params.batch * params.num_tiles_q);
      kernel<<<grid, Traits::kNumThreads, kSmemBytes, stream>>>(params, maps);
    }
    RINGPACK_CHECK_LAUNCH();
  };
  auto run_overlap = [&](auto persistent) {
    if (pingpong) {
      run(forward_wgmma_kernel<Traits, kMerge, persistent.value, true>, persistent);
    } else {
      run(forward_wgmma_kernel<Traits, kMerge, persistent.value, false>, persistent);
    }
  };
  if (persistent) {
    run_overlap(std::true_type{});
  } else {
    run_overlap(std::false_type{});
  }
}

}  // namespace ringpack::cuda
