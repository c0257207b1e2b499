// Device building blocks of the backward kernels (cp.async and ldmatrix from common/ptx.h):
// swizzled tiles, ldmatrix fragment loads and the m16n8k16 tensor-core MMA (bf16/fp16 in, fp32
// accumulate).
//
// Fragment layouts are those of the PTX ISA for mma.m16n8k16 (row.col): with lane = 4*g + t,
//   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8):  c0,c1 = (g, 2t..2t+1),  c2,c3 = (g+8, 2t..2t+1)
// so the C fragments of two adjacent n8 tiles are, packed to 16 bits, the A fragment of one k16
// step (the FlashAttention-2 register reuse of P and dS).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/mma_sync.h"
#include "cuda/common/ptx.h"

namespace ringpack::cuda::bwd {

constexpr int kMmaM = 16;
constexpr int kMmaN = 8;
constexpr int kMmaK = 16;

// ---- element types: ElementOps (pack, unpack, mma) from common/mma_sync.h
// ----------------------------

// ---- shared-memory tiles ----------------------------------------------------------------------

// A [kRows, kCols] tile of 16-bit elements in shared memory, row-major, with the 16-byte chunks
// of each row XOR-swizzled so that the 8 rows one ldmatrix reads (same logical chunk) fall into
// 8 distinct bank groups: conflict-free ldmatrix and cp.async.
template <int kRows_, int kCols_>
struct SmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kChunks = kCols / kChunkElems;  // chunks per row
  static_assert(kChunks >= 4 && (kChunks & (kChunks - 1)) == 0, "row of 4, 8, 16.. chunks");
  // Rows that share one 128-byte bank line before the pattern repeats.
  static constexpr int kRowsPerLine = kChunks >= 8 ? 1 : 8 / kChunks;
  static constexpr int kSwizzleMask = kChunks >= 8 ? 7 : kChunks - 1;
  static constexpr int kElems = kRows * kCols;

  // Element offset of (row, col).
  __device__ static int offset(int row, int col) {
    const int chunk = (col / kChunkElems) ^ ((row / kRowsPerLine) & kSwizzleMask);
    return row * kCols + chunk * kChunkElems + col % kChunkElems;
  }
};

// Copies rows [row0, row0 + kRows) of a BSHD tensor slice (one head: `head_offset` elements into
// each token, `row_stride` elements per token) into a SmemTile; rows >= seqlen are zero-filled.
template <class Tile, int kThreads>
__device__ inline void load_tile_async(uint16_t* smem, const uint16_t* gmem, int64_t row_stride,
                                       int row0, int seqlen, int thread) {
  constexpr int kTotalChunks = Tile::kElems / kChunkElems;
  static_assert(kTotalChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int i = 0; i < kTotalChunks / kThreads; ++i) {
    const int chunk = thread + i * kThreads;
    const int row = chunk / Tile::kChunks;
    const int col = (chunk % Tile::kChunks) * kChunkElems;
    const bool valid = row0 + row < seqlen;
    const uint16_t* src = valid ? gmem + (row0 + row) * row_stride + col : gmem;
    cp_async_16(smem + Tile::offset(row, col), src, valid);
  }
}

// Per-lane ldmatrix addressing. Each lane supplies the address of one 16-byte row of an 8x8
// matrix: lane row r_l (r_l % 8 == lane % 8) and lane column c_l (0 or 8). For a fragment at
// (r, c) with r a multiple of 8 and c a multiple of 16, the swizzle term of row r + r_l equals
// that of r_l and the chunk bits of c and c_l are disjoint, so
//   offset(r + r_l, c + c_l) = (offset(r_l, c_l) ^ c) + r * kCols,
// one XOR and an immediate per load on one register per tile, instead of a swizzled address per
// fragment held live across the loop.
template <class Tile>
struct LaneOffset {
  int base;
  __device__ LaneOffset(int lane_row, int lane_col) : base(Tile::offset(lane_row, lane_col)) {}
  __device__ int at(int row, int col) const { return (base ^ col) + row * Tile::kCols; }
};

// Lane patterns of ldmatrix.x4 (lane = 8 * matrix + row within the matrix):
// A stored A[m][k] (non-trans): matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15).
template <class Tile>
__device__ inline LaneOffset<Tile> lane_a(int lane) {
  return LaneOffset<Tile>(lane % 16, (lane / 16) * 8);
}
// A = S^T from S[k][m] (trans), and B from B^T[n][k] (non-trans): the matrix index walks the
// column first, then the row half.
template <class Tile>
__device__ inline LaneOffset<Tile> lane_a_trans(int lane) {
  return LaneOffset<Tile>(lane % 8 + (lane / 16) * 8, ((lane / 8) % 2) * 8);
}
template <class Tile>
__device__ inline LaneOffset<Tile> lane_b_nk(int lane) {
  return lane_a_trans<Tile>(lane);
}
// B from B[k][n] (trans): matrices (k0-7,n0-7) (k8-15,n0-7) (k0-7,n8-15) (k8-15,n8-15).
template <class Tile>
__device__ inline LaneOffset<Tile> lane_b_kn(int lane) {
  return LaneOffset<Tile>(lane % 8 + ((lane / 8) % 2) * 8, (lane / 16) * 8);
}

// A fragment (16x16 at rows m0.., cols k0..) of a tile stored row-major as A[m][k].
template <class Tile>
__device__ inline void load_a(uint32_t (&a)[4], const uint16_t* smem, const LaneOffset<Tile>& l,
                              int m0, int k0) {
  ldmatrix_x4(a, smem + l.at(m0, k0));
}

// A fragment (16x16 at m0, k0) of A = S^T where the tile stores S[k][m].
template <class Tile>
__device__ inline void load_a_trans(uint32_t (&a)[4], const uint16_t* smem,
                                    const LaneOffset<Tile>& l, int m0, int k0) {
  ldmatrix_x4_trans(a, smem + l.at(k0, m0));
}

// B fragments of two n8 tiles (n0.., n0+8..) x k16 (k0..), tile stored as B^T[n][k]:
// b[0], b[1] for n tile 0; b[2], b[3] for n tile 1.
template <class Tile>
__device__ inline void load_b_nk(uint32_t (&b)[4], const uint16_t* smem, const LaneOffset<Tile>& l,
                                 int n0, int k0) {
  ldmatrix_x4(b, smem + l.at(n0, k0));
}

// The same fragments from a tile stored as B[k][n].
template <class Tile>
__device__ inline void load_b_kn(uint32_t (&b)[4], const uint16_t* smem, const LaneOffset<Tile>& l,
                                 int n0, int k0) {
  ldmatrix_x4_trans(b, smem + l.at(k0, n0));
}

// ---- warp-level GEMMs -------------------------------------------------------------------------

// acc[16 x kN] += A[16 x kK] * B[kK x kN]: A rows m0.. of a tile stored A[m][k], B rows n0..
// of a tile stored B^T[n][k] (both K-contiguous, as Q K^T and dO V^T); m0, n0 multiples of 16.
template <class Element, int kN, int kK, class TileA, class TileB>
__device__ inline void gemm_smem_nk(float (&acc)[kN / kMmaN][4], const uint16_t* smem_a, int m0,
                                    const uint16_t* smem_b, int n0, int lane) {
  const LaneOffset<TileA> lane_offset_a = lane_a<TileA>(lane);
  const LaneOffset<TileB> lane_offset_b = lane_b_nk<TileB>(lane);
#pragma unroll
  for (int k = 0; k < kK; k += kMmaK) {
    uint32_t a[4];
    load_a(a, smem_a, lane_offset_a, m0, k);
#pragma unroll
    for (int n = 0; n < kN; n += 2 * kMmaN) {
      uint32_t b[4];
      load_b_nk(b, smem_b, lane_offset_b, n0 + n, k);
      ElementOps<Element>::mma(acc[n / kMmaN], a, b[0], b[1]);
      ElementOps<Element>::mma(acc[n / kMmaN + 1], a, b[2], b[3]);
    }
  }
}

// acc[16 x kN] += A[16 x kK] * B[kK x kN]: A in registers (packed k16 fragments, from C
// fragments), B rows k0.., columns n0.. of a tile stored B[k][n]; k0, n0 multiples of 16.
template <class Element, int kN, int kK, class TileB>
__device__ inline void gemm_reg_kn(float (&acc)[kN / kMmaN][4], const uint32_t (&a)[kK / kMmaK][4],
                                   const uint16_t* smem_b, int k0, int n0, int lane) {
  const LaneOffset<TileB> lane_offset_b = lane_b_kn<TileB>(lane);
#pragma unroll
  for (int k = 0; k < kK; k += kMmaK) {
#pragma unroll
    for (int n = 0; n < kN; n += 2 * kMmaN) {
      uint32_t b[4];
      load_b_kn(b, smem_b, lane_offset_b, n0 + n, k0 + k);
      ElementOps<Element>::mma(acc[n / kMmaN], a[k / kMmaK], b[0], b[1]);
      ElementOps<Element>::mma(acc[n / kMmaN + 1], a[k / kMmaK], b[2], b[3]);
    }
  }
}

// Packs C fragments [16 x kN] (fp32) into A fragments of kN/16 k16 steps.
template <class Element, int kN>
__device__ inline void pack_a(uint32_t (&a)[kN / kMmaK][4], const float (&c)[kN / kMmaN][4]) {
#pragma unroll
  for (int s = 0; s < kN / kMmaK; ++s) {
    a[s][0] = ElementOps<Element>::pack(c[2 * s][0], c[2 * s][1]);
    a[s][1] = ElementOps<Element>::pack(c[2 * s][2], c[2 * s][3]);
    a[s][2] = ElementOps<Element>::pack(c[2 * s + 1][0], c[2 * s + 1][1]);
    a[s][3] = ElementOps<Element>::pack(c[2 * s + 1][2], c[2 * s + 1][3]);
  }
}

template <int kTiles>
__device__ inline void zero(float (&acc)[kTiles][4]) {
#pragma unroll
  for (int i = 0; i < kTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

// dst += value for a pair of fp32 accumulators: with atomics when other CTAs add to the same
// rows; otherwise one read-modify-write (the product was rounded before, so a step adds exactly
// its own contribution).
__device__ __forceinline__ void add_pair(float2* dst, float2 value, bool atomic) {
  if (atomic) {
#if __CUDA_ARCH__ >= 900
    atomicAdd(dst, value);  // the float2 overload needs compute capability 9.x
#else
    atomicAdd(&dst->x, value.x);
    atomicAdd(&dst->y, value.y);
#endif
    return;
  }
  float2 sum = *dst;
  sum.x += value.x;
  sum.y += value.y;
  *dst = sum;
}

}  // namespace ringpack::cuda::bwd
