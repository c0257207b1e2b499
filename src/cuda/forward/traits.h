// Compile-time tile choices of the forward kernel and the one heuristic that picks
// them per head_dim. Host and device code include this header.
//
// A CTA owns kBlockM query rows of one head (kRowsPerWarp rows per warp, kMTiles m16 MMA row
// blocks each) and streams key/value tiles of kBlockN tokens through a two-stage cp.async
// pipeline.
#pragma once

#include <cstdint>

namespace ringpack::cuda {

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kNumWarps_, class Element_>
struct ForwardTraits {
  using Element = Element_;  // __nv_bfloat16 or __half
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per CTA
  static constexpr int kBlockN = kBlockN_;  // key/value tokens per pipeline stage
  static constexpr int kNumWarps = kNumWarps_;
  static constexpr int kNumThreads = kNumWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kNumWarps;
  // m16 MMA row blocks per warp: two let every K/V fragment read from shared memory feed two
  // MMAs, halving shared-memory traffic per MMA (the limiter of mma.sync attention).
  static constexpr int kMTiles = kRowsPerWarp / 16;
  static constexpr int kStages = 2;  // double-buffered K/V
  // Q fragments stay in registers across key tiles only while they fit beside O and S.
  static constexpr bool kQInRegisters = kMTiles == 1 && kHeadDim <= 128;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per token row

  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  // Shared memory: Q tile, K and V per stage, segment ids and positions of K per stage and of
  // the query rows.
  static constexpr int kSmemBytes = int(sizeof(Element)) * (kQElems + 2 * kStages * kKVElems) +
                                    2 * (kStages * kBlockN + kBlockM) * int(sizeof(int32_t));

  static_assert(kHeadDim % 64 == 0, "head_dim must be a multiple of 64 (swizzle width)");
  static_assert(kRowsPerWarp % 16 == 0 && kBlockN % 16 == 0, "MMA tile multiples");
};

// Tiles for one head_dim, and why:
//  64:  128 x 64, 4 warps of 32 rows: O (64) + S (64) fp32 registers per thread (128 keys
//       would spill S); 48 KB shared memory.
//  128: 128 x 64, 4 warps of 32 rows: O (128) + S (64) registers per thread, Q re-read from
//       shared memory; 96 KB shared memory, two CTAs (8 warps) per SM.
//  256: 64 x 64, 4 warps of 16 rows: O alone is 128 registers per thread; 160 KB shared memory.
struct ForwardTileConfig {
  int block_m;
  int block_n;
  int num_warps;
};

constexpr ForwardTileConfig forward_tile_config(int head_dim) {
  return head_dim == 64    ? ForwardTileConfig{128, 64, 4}
         : head_dim == 128 ? ForwardTileConfig{128, 64, 4}
                           : ForwardTileConfig{64, 64, 4};
}

template <int kHeadDim, class Element>
using ForwardTraitsFor = ForwardTraits<kHeadDim, forward_tile_config(kHeadDim).block_m,
                                       forward_tile_config(kHeadDim).block_n,
                                       forward_tile_config(kHeadDim).num_warps, Element>;

// The Hopper main loop (forward/kernel_sm90.h, sm_90a): two consumer warpgroups of 64 query rows
// each (kBlockM = 128) share K/V tiles of kBlockN keys that a producer warpgroup brings in with
// TMA. Per consumer thread: S (kBlockN / 2 fp32), O (kHeadDim / 2) and P (kBlockN / 4 packed
// pairs) in registers. One CTA per SM, 384 threads: the entry cap is 168 registers, then
// setmaxnreg moves them to the consumers (ForwardWgmmaRegisters: 240 per consumer and 24 per
// producer thread). 128-byte swizzle (common/wgmma.h).
//  64, 128: kBlockN = 128. Shared memory at head_dim 128: Q 32 KB + 2 stages x (K, V) 32 KB =
//           160 KB.
//  256:     kBlockN = 64: O alone is 128 registers a thread (with S 32 and P 16 beside it), and
//           Q 64 KB + 2 stages x (K, V) 32 KB = 192 KB of shared memory.
constexpr ForwardTileConfig forward_wgmma_tiles(int head_dim) {
  return ForwardTileConfig{128, head_dim <= 128 ? 128 : 64, 12};  // 3 warpgroups
}

template <int kHeadDim_, class Element_>
struct ForwardWgmmaTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = forward_wgmma_tiles(kHeadDim).block_m;
  static constexpr int kBlockN = forward_wgmma_tiles(kHeadDim).block_n;
  static constexpr int kNumConsumerThreads = 2 * 128;            // two warpgroups
  static constexpr int kNumThreads = kNumConsumerThreads + 128;  // + the producer warpgroup
  static constexpr int kRowsPerWarp = 16;  // accumulator rows of a warp inside its warpgroup
  static constexpr int kMTiles = 1;
  static constexpr int kStages = 2;
  static constexpr int kChunksPerRow = kHeadDim / 8;
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 256,
                "wgmma N for O is head_dim: 64, 128 or 256");
};

// setmaxnreg's split of the 384 x 168 registers: 256 x kConsumer + 128 x kProducer. The
// persistent schedule's producer walks its work items in more registers than 24 (ptxas spills
// at head_dim 64 and 128), which the consumers spare there; at 256 they cannot (they spill below
// 240), and the producer spills 12-20 bytes instead.
template <int kHeadDim, bool kPersistent>
struct ForwardWgmmaRegisters {
  static constexpr bool kWide = kPersistent && kHeadDim <= 128;
  static constexpr int kConsumer = kWide ? 232 : 240;
  static constexpr int kProducer = kWide ? 40 : 24;
  static_assert(256 * kConsumer + 128 * kProducer <= 384 * 168, "the CTA's registers");
};

// The head dims the wgmma main loop is built for (GPUs before sm_90 use the mma.sync loop).
constexpr bool forward_has_wgmma(int head_dim) {
  return head_dim == 64 || head_dim == 128 || head_dim == 256;
}

}  // namespace ringpack::cuda
