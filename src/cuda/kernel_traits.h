// Compile-time tile choices of the forward kernel (STYLE.md 3) and the one heuristic that picks
// them per head_dim. Host and device code include this header.
//
// A CTA owns kBlockM query rows of one head (16 rows per warp, one m16 MMA row block each) and
// streams key/value tiles of kBlockN tokens through a two-stage cp.async pipeline.
#pragma once

namespace ringpack::cuda {

template <int kHeadDim_, int kBlockM_, int kBlockN_, class Element_>
struct ForwardTraits {
  using Element = Element_;  // __nv_bfloat16 or __half
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per CTA
  static constexpr int kBlockN = kBlockN_;  // key/value tokens per pipeline stage
  static constexpr int kRowsPerWarp = 16;   // one m16 MMA row block
  static constexpr int kNumWarps = kBlockM / kRowsPerWarp;
  static constexpr int kNumThreads = kNumWarps * 32;
  static constexpr int kStages = 2;  // double-buffered K/V
  // Q fragments stay in registers across key tiles while they fit beside the O accumulator.
  static constexpr bool kQInRegisters = kHeadDim <= 128;
  static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks per token row

  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  // Shared memory: Q tile, K and V per stage, segment ids and positions of K per stage.
  static constexpr int kSmemBytes =
      int(sizeof(Element)) * (kQElems + 2 * kStages * kKVElems) + 2 * kStages * kBlockN * 4;

  static_assert(kHeadDim % 64 == 0, "head_dim must be a multiple of 64 (swizzle width)");
  static_assert(kBlockM % kRowsPerWarp == 0 && kBlockN % 16 == 0, "MMA tile multiples");
};

// Tiles for one head_dim, and why:
//  64:  128 x 128, 8 warps: small O accumulator (32 fp32/thread), so wide key tiles amortise the
//       softmax and barriers; 80 KB shared memory.
//  128: 128 x 64, 8 warps: O (64) + S (32) + Q (32) fp32/b32 registers per thread fit under 255
//       without spills; 96 KB shared memory, one CTA of 8 warps per SM.
//  256: 64 x 64, 4 warps: O alone is 128 registers per thread, so Q is re-read from shared
//       memory; 160 KB shared memory.
struct ForwardTileConfig {
  int block_m;
  int block_n;
};

constexpr ForwardTileConfig forward_tile_config(int head_dim) {
  return head_dim == 64    ? ForwardTileConfig{128, 128}
         : head_dim == 128 ? ForwardTileConfig{128, 64}
                           : ForwardTileConfig{64, 64};
}

template <int kHeadDim, class Element>
using ForwardTraitsFor = ForwardTraits<kHeadDim, forward_tile_config(kHeadDim).block_m,
                                       forward_tile_config(kHeadDim).block_n, Element>;

}  // namespace ringpack::cuda
