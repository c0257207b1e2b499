// The GPU reference attention (reference_attention.h): the loops of
// src/cpu/reference_attention.cpp with the sums spread over the 32 lanes of a warp.
//
// Forward: one warp per (row b, query head h, query i); lane l holds elements l, l + 32, ... of
// the head dim, and the warp takes its partners a few at a time (for_each_visible). Pass 1 walks
// the visible keys with an online max / sum to get lse; pass 2 walks them again for O = sum P V
// with P = exp(s - lse) (rounded to dtype in the low-precision baseline, as lowprec_forward does).
// Backward: delta = <dO, O> per query row; dQ with one warp per query row (the forward's walk); dK,
// dV with one warp per (row, kv head, key) walking the queries of every q head of its group, so no
// sum is shared between warps (no atomics, deterministic). The 8 warps of a block take 8
// neighbouring rows of one head and stage the tokens they walk (K and V, or Q and dO) in shared
// memory, a tile at a time, widened to the accumulation type.
//
// Which pairs are walked (docs/numerics.md, "The GPU reference"): the host finds, per token, the
// index range of the partners that can be visible. When the token's segment id forms one
// contiguous run of the row and positions do not decrease along the run, the range is the part
// of the run whose positions satisfy the causal and window bounds (binary searches); when the
// run's positions are not sorted it is the whole run; when the segment id occurs in more than
// one run it is the whole row; padding (segment 0) walks nothing. visible() is evaluated for
// every walked pair, so a range that is too wide costs time, never correctness.
#include "cuda/reference/reference_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>
#include <vector>

#include "cuda/common/cuda_check.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

constexpr int kWarps = 8;  // rows per block
constexpr int kThreads = 32 * kWarps;
constexpr int kMaxHeadDim = 256;
constexpr int kTileElems = 2048;  // tile tokens x max head dim of the kernel

// DType as the kernels see it.
constexpr int kDtypeF32 = 0, kDtypeBF16 = 1, kDtypeF16 = 2;

int dtype_code(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return kDtypeF32;
    case DType::kBF16:
      return kDtypeBF16;
    case DType::kF16:
      return kDtypeF16;
  }
  RINGPACK_FAIL("GPU reference: unknown dtype");
}

struct Params {
  int seqlen = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  int group = 1;  // q heads per kv head
  MaskSpec mask;
  double scale = 0.0;
  int dtype = kDtypeF32;
  const void* q = nullptr;          // [b, s, hq, d] in dtype
  const void* k = nullptr;          // [b, s, hkv, d]
  const void* v = nullptr;          // [b, s, hkv, d]
  const void* dout = nullptr;       // [b, s, hq, d]
  const int32_t* seg = nullptr;     // [b, s]
  const int32_t* pos = nullptr;     // [b, s]
  const int32_t* key_lo = nullptr;  // [b, s]: token as a query walks keys [key_lo, key_hi)
  const int32_t* key_hi = nullptr;
  const int32_t* query_lo = nullptr;  // [b, s]: token as a key walks queries [query_lo, query_hi)
  const int32_t* query_hi = nullptr;
  const double* out_in = nullptr;  // [b, s, hq, d]: the forward's O (for delta)
  const double* lse_in = nullptr;  // [b, hq, s]
  double* out = nullptr;           // [b, s, hq, d]
  double* lse = nullptr;           // [b, hq, s]
  double* delta = nullptr;         // [b, hq, s]
  double* dq = nullptr;            // [b, s, hq, d]
  double* dk = nullptr;            // [b, s, hkv, d]
  double* dv = nullptr;            // [b, s, hkv, d]
};

__device__ __forceinline__ float load_input(const void* data, int dtype, int64_t i) {
  if (dtype == kDtypeBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
  if (dtype == kDtypeF16) return __half2float(static_cast<const __half*>(data)[i]);
  return static_cast<const float*>(data)[i];
}

// round_to(dtype, x) of src/core/dtype.cpp: round to nearest even and back.
__device__ __forceinline__ float round_to_dtype(float x, int dtype) {
  if (dtype == kDtypeBF16) return __bfloat162float(__float2bfloat16_rn(x));
  if (dtype == kDtypeF16) return __half2float(__float2half_rn(x));
  return x;
}

// The arithmetic of one precision (Precision of src/cpu/reference_attention.cpp): Acc = double
// is the reference; Acc = float is the low-precision baseline, which rounds P, dS and the
// outputs to dtype.
template <class Acc>
struct Prec {
  static constexpr bool kLow = std::is_same_v<Acc, float>;
  static __device__ __forceinline__ Acc round(Acc x, int dtype) {
    if constexpr (kLow) {
      return round_to_dtype(x, dtype);
    } else {
      return x;
    }
  }
  static __device__ __forceinline__ Acc exp(Acc x) {
    if constexpr (kLow) {
      return ::expf(x);
    } else {
      return ::exp(x);
    }
  }
  static __device__ __forceinline__ Acc log(Acc x) {
    if constexpr (kLow) {
      return ::logf(x);
    } else {
      return ::log(x);
    }
  }
};

// A row of the head dim in registers: lane holds elements lane + 32 e.
template <class Acc, int kPerLane>
__device__ __forceinline__ void load_row(Acc (&row)[kPerLane], const void* data, int dtype,
                                         int64_t offset, int head_dim, bool valid) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int x = lane + 32 * e;
    row[e] = (valid && x < head_dim) ? Acc(load_input(data, dtype, offset + x)) : Acc(0);
  }
}

// This lane's part of <row, tile_row>: its elements lane + 32 e, in order.
template <class Acc, int kPerLane>
__device__ __forceinline__ Acc lane_dot(const Acc (&row)[kPerLane], const Acc* tile_row,
                                        int head_dim) {
  const int lane = threadIdx.x % 32;
  Acc sum = 0;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int x = lane + 32 * e;
    if (x < head_dim) sum += row[e] * tile_row[x];
  }
  return sum;
}

// Tokens [first, first + count) of head `head` of a [b, s, heads, d] tensor into a shared tile
// of rows of kMaxD, widened to Acc. Every thread of the block takes part.
template <class Acc, int kMaxD>
__device__ __forceinline__ void stage_tile(Acc* tile, const void* data, int dtype, int64_t row0,
                                           int first, int count, int heads, int head,
                                           int head_dim) {
  for (int idx = threadIdx.x; idx < count * head_dim; idx += kThreads) {
    const int t = idx / head_dim, x = idx - t * head_dim;
    const int64_t offset = ((row0 + first + t) * heads + head) * head_dim + x;
    tile[t * kMaxD + x] = Acc(load_input(data, dtype, offset));
  }
}

// The union [lo, hi) over the block's warps of their walk ranges (empty ranges left out); the
// same in every thread. lo > hi-1 when no warp walks anything.
__device__ __forceinline__ int2 block_range(int lo, int hi, int* shared_lo, int* shared_hi) {
  if (threadIdx.x == 0) {
    *shared_lo = INT_MAX;
    *shared_hi = 0;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0 && hi > lo) {
    atomicMin(shared_lo, lo);
    atomicMax(shared_hi, hi);
  }
  __syncthreads();
  return make_int2(*shared_lo, *shared_hi);
}

// The walk of one warp over the partners of its token (index `self` of row b): the partners
// [lo, hi) it visits, and the union of the block's ranges, the tiles every thread stages.
struct Walk {
  bool valid;    // self < seqlen; else the warp only helps to stage tiles
  int64_t row0;  // the row's first token: b * seqlen
  int64_t tok;   // the warp's token: row0 + self (row0 when not valid)
  int lo, hi;    // partners [lo, hi) of the row; empty when the token walks nothing
  int32_t seg;   // the token's segment id and position (0 when not valid)
  int32_t pos;
  int tiles_lo;  // the block's union of [lo, hi)
  int tiles_hi;
};

// The warp's token (index `self` of row b); its range is set by walk_partners.
__device__ __forceinline__ Walk walk_of(const Params& p, int b, int self) {
  Walk w;
  w.valid = self < p.seqlen;
  w.row0 = int64_t(b) * p.seqlen;
  w.tok = w.row0 + (w.valid ? self : 0);
  return w;
}

// The partners of the walk: [lo_of, hi_of) of its token when it `walks` (a valid token with
// something to add: dQ skips a row with no visible key), and the block's union. Every thread of
// the block calls it (block_range has barriers).
__device__ __forceinline__ void walk_partners(Walk& w, const Params& p, bool walks,
                                              const int32_t* lo_of, const int32_t* hi_of,
                                              int* shared_lo, int* shared_hi) {
  w.lo = walks ? lo_of[w.tok] : 0;
  w.hi = walks ? hi_of[w.tok] : 0;
  w.seg = w.valid ? p.seg[w.tok] : 0;
  w.pos = w.valid ? p.pos[w.tok] : 0;
  const int2 tiles = block_range(w.lo, w.hi, shared_lo, shared_hi);
  w.tiles_lo = tiles.x;
  w.tiles_hi = tiles.y;
}

// The tiles of the block's union, kTile tokens at a time: stage(first, count) fills the shared
// tiles between two barriers, then visit(first, count) reads them.
template <int kTile, class Stage, class Visit>
__device__ __forceinline__ void for_each_tile(const Walk& w, Stage&& stage, Visit&& visit) {
  for (int first = w.tiles_lo; first < w.tiles_hi; first += kTile) {
    const int count = min(kTile, w.tiles_hi - first);
    __syncthreads();  // the previous tile has been read
    stage(first, count);
    __syncthreads();
    visit(first, count);
  }
}

// Dot products of a walk with the tile's partners: a = <row_a, tile_a[t]> and, with kDots = 2,
// b = <row_b, tile_b[t]>; each lane_dot summed over the warp by an xor butterfly, which adds the
// same two numbers in both lanes of each exchange: the same value in every lane.
template <class Acc, int kPerLane>
struct PartnerDots {
  const Acc (&row_a)[kPerLane];
  const Acc* tile_a;
  const Acc (&row_b)[kPerLane];
  const Acc* tile_b;
};

// Partners visited kVisitBatch at a time: their dot products are summed over the warp together,
// so the shuffle chains of a batch overlap (one partner at a time leaves the warp waiting on one
// chain). The sums are the ones a partner at a time computes, in the same order.
constexpr int kVisitBatch = 4;

// fn(t, j, a, b) for each partner j = first + t of the tile within [lo, hi) that the mask rule
// lets the pair see, with its dot products (b = 0 when kDots = 1); kTokenIsQuery: the warp's
// token is the query of the pair (else its key).
template <bool kTokenIsQuery, int kDots, class Acc, int kPerLane, class Fn>
__device__ __forceinline__ void for_each_visible(const Params& p, const Walk& w, int first,
                                                 int count, const PartnerDots<Acc, kPerLane>& d,
                                                 Fn&& fn) {
  constexpr int kMaxD = 32 * kPerLane;
  const int t_lo = max(0, w.lo - first), t_hi = min(count, w.hi - first);
  for (int t0 = t_lo; t0 < t_hi; t0 += kVisitBatch) {
    bool seen[kVisitBatch];
    Acc a[kVisitBatch], b[kVisitBatch];
#pragma unroll
    for (int u = 0; u < kVisitBatch; ++u) {
      const int t = t0 + u;
      seen[u] = false;
      a[u] = b[u] = Acc(0);
      if (t >= t_hi) continue;  // warp-uniform
      const int32_t seg = p.seg[w.row0 + first + t], pos = p.pos[w.row0 + first + t];
      seen[u] = kTokenIsQuery ? visible(w.seg, w.pos, seg, pos, p.mask)
                              : visible(seg, pos, w.seg, w.pos, p.mask);
      if (!seen[u]) continue;
      a[u] = lane_dot(d.row_a, d.tile_a + t * kMaxD, p.head_dim);
      if constexpr (kDots == 2) b[u] = lane_dot(d.row_b, d.tile_b + t * kMaxD, p.head_dim);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
#pragma unroll
      for (int u = 0; u < kVisitBatch; ++u) {
        a[u] += __shfl_xor_sync(0xffffffffu, a[u], offset);
        if constexpr (kDots == 2) b[u] += __shfl_xor_sync(0xffffffffu, b[u], offset);
      }
    }
#pragma unroll
    for (int u = 0; u < kVisitBatch; ++u) {
      if (seen[u]) fn(t0 + u, first + t0 + u, a[u], b[u]);
    }
  }
}

// O and lse: grid (ceil(s / kWarps), hq, b).
template <class Acc, int kPerLane>
__global__ void forward_kernel(const Params p) {
  constexpr int kMaxD = 32 * kPerLane;
  constexpr int kTile = kTileElems / kMaxD;
  __shared__ Acc k_tile[kTile * kMaxD];
  __shared__ Acc v_tile[kTile * kMaxD];
  __shared__ int shared_lo, shared_hi;
  using P = Prec<Acc>;
  const int D = p.head_dim;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group;
  const int i = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  Walk w = walk_of(p, b, i);
  walk_partners(w, p, w.valid, p.key_lo, p.key_hi, &shared_lo, &shared_hi);

  Acc q[kPerLane];
  load_row(q, p.q, p.dtype, (w.tok * p.heads_q + h) * D, D, w.valid);
  const Acc scale = Acc(p.scale);
  const auto stage_k = [&](int first, int count) {
    stage_tile<Acc, kMaxD>(k_tile, p.k, p.dtype, w.row0, first, count, p.heads_kv, hk, D);
  };
  const PartnerDots<Acc, kPerLane> dots_qk{q, k_tile, q, nullptr};

  // Pass 1: lse = m + log(l), m the running maximum, l the sum of exp(s - m).
  Acc m = -INFINITY, l = 0;
  for_each_tile<kTile>(w, stage_k, [&](int first, int count) {
    for_each_visible<true, 1>(p, w, first, count, dots_qk, [&](int, int, Acc qk, Acc) {
      const Acc s = scale * qk;
      if (s > m) {
        l = l * P::exp(m - s) + Acc(1);
        m = s;
      } else {
        l += P::exp(s - m);
      }
    });
  });
  const Acc lse = l > Acc(0) ? m + P::log(l) : Acc(-INFINITY);

  // Pass 2: O = sum P V.
  Acc o[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) o[e] = 0;
  const auto stage_kv = [&](int first, int count) {
    stage_k(first, count);
    stage_tile<Acc, kMaxD>(v_tile, p.v, p.dtype, w.row0, first, count, p.heads_kv, hk, D);
  };
  for_each_tile<kTile>(w, stage_kv, [&](int first, int count) {
    if (!(l > Acc(0))) return;  // no visible key (warp-uniform); the barriers still run
    for_each_visible<true, 1>(p, w, first, count, dots_qk, [&](int t, int, Acc qk, Acc) {
      const Acc s = scale * qk;
      const Acc prob = P::round(P::exp(s - lse), p.dtype);
      const Acc* v_row = v_tile + t * kMaxD;
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int x = lane + 32 * e;
        if (x < D) o[e] += prob * v_row[x];
      }
    });
  });
  if (!w.valid) return;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int x = lane + 32 * e;
    if (x < D) p.out[(w.tok * p.heads_q + h) * D + x] = double(P::round(o[e], p.dtype));
  }
  if (lane == 0) p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen + i] = double(lse);
}

// delta[b, h, i] = <dO, O> in Acc, summed in head-dim order: one thread per (b, h, i).
template <class Acc>
__global__ void delta_kernel(const Params p, int64_t rows) {
  const int64_t r = int64_t(blockIdx.x) * kThreads + threadIdx.x;  // (b * hq + h) * s + i
  if (r >= rows) return;
  const int64_t i = r % p.seqlen;
  const int64_t bh = r / p.seqlen;
  const int64_t h = bh % p.heads_q, b = bh / p.heads_q;
  const int64_t offset = ((b * p.seqlen + i) * p.heads_q + h) * p.head_dim;
  Acc sum = 0;
  for (int x = 0; x < p.head_dim; ++x) {
    sum += Acc(load_input(p.dout, p.dtype, offset + x)) * Acc(p.out_in[offset + x]);
  }
  p.delta[r] = double(sum);
}

// dQ = sum_k scale dS K: grid (ceil(s / kWarps), hq, b).
template <class Acc, int kPerLane>
__global__ void dq_kernel(const Params p) {
  constexpr int kMaxD = 32 * kPerLane;
  constexpr int kTile = kTileElems / kMaxD;
  __shared__ Acc k_tile[kTile * kMaxD];
  __shared__ Acc v_tile[kTile * kMaxD];
  __shared__ int shared_lo, shared_hi;
  using P = Prec<Acc>;
  const int D = p.head_dim;
  const int b = blockIdx.z, h = blockIdx.y, hk = h / p.group;
  const int i = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  Walk w = walk_of(p, b, i);
  const int64_t stat = (int64_t(b) * p.heads_q + h) * p.seqlen + (w.valid ? i : 0);
  const double row_lse = p.lse_in[stat];
  // A row with no visible key has zero gradient: it walks nothing.
  walk_partners(w, p, w.valid && row_lse != -INFINITY, p.key_lo, p.key_hi, &shared_lo, &shared_hi);

  Acc q[kPerLane], d_o[kPerLane], dq[kPerLane];
  load_row(q, p.q, p.dtype, (w.tok * p.heads_q + h) * D, D, w.valid);
  load_row(d_o, p.dout, p.dtype, (w.tok * p.heads_q + h) * D, D, w.valid);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) dq[e] = 0;
  const Acc scale = Acc(p.scale);
  const Acc lse = Acc(row_lse);
  const Acc delta = Acc(p.delta[stat]);

  const auto stage_kv = [&](int first, int count) {
    stage_tile<Acc, kMaxD>(k_tile, p.k, p.dtype, w.row0, first, count, p.heads_kv, hk, D);
    stage_tile<Acc, kMaxD>(v_tile, p.v, p.dtype, w.row0, first, count, p.heads_kv, hk, D);
  };
  const PartnerDots<Acc, kPerLane> dots{q, k_tile, d_o, v_tile};  // <Q, K>, <dO, V>
  for_each_tile<kTile>(w, stage_kv, [&](int first, int count) {
    for_each_visible<true, 2>(p, w, first, count, dots, [&](int t, int, Acc qk, Acc dprob) {
      const Acc* k_row = k_tile + t * kMaxD;
      const Acc prob = P::exp(scale * qk - lse);
      const Acc ds = P::round(prob * (dprob - delta), p.dtype);
#pragma unroll
      for (int e = 0; e < kPerLane; ++e) {
        const int x = lane + 32 * e;
        if (x < D) dq[e] += scale * ds * k_row[x];
      }
    });
  });
  if (!w.valid) return;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int x = lane + 32 * e;
    if (x < D) p.dq[(w.tok * p.heads_q + h) * D + x] = double(P::round(dq[e], p.dtype));
  }
}

// dK = sum_q scale dS Q and dV = sum_q P dO over the q heads of the kv head's group: grid
// (ceil(s / kWarps), hkv, b), one warp per key.
template <class Acc, int kPerLane>
__global__ void dkdv_kernel(const Params p) {
  constexpr int kMaxD = 32 * kPerLane;
  constexpr int kTile = kTileElems / kMaxD;
  __shared__ Acc q_tile[kTile * kMaxD];
  __shared__ Acc do_tile[kTile * kMaxD];
  __shared__ int shared_lo, shared_hi;
  using P = Prec<Acc>;
  const int D = p.head_dim;
  const int b = blockIdx.z, hk = blockIdx.y;
  const int j = blockIdx.x * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  Walk w = walk_of(p, b, j);
  walk_partners(w, p, w.valid, p.query_lo, p.query_hi, &shared_lo, &shared_hi);

  Acc k[kPerLane], v[kPerLane], dk[kPerLane], dv[kPerLane];
  load_row(k, p.k, p.dtype, (w.tok * p.heads_kv + hk) * D, D, w.valid);
  load_row(v, p.v, p.dtype, (w.tok * p.heads_kv + hk) * D, D, w.valid);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) dk[e] = dv[e] = 0;
  const Acc scale = Acc(p.scale);

  for (int gh = 0; gh < p.group; ++gh) {
    const int h = hk * p.group + gh;
    const int64_t stat0 = (int64_t(b) * p.heads_q + h) * p.seqlen;
    const auto stage_q_do = [&](int first, int count) {
      stage_tile<Acc, kMaxD>(q_tile, p.q, p.dtype, w.row0, first, count, p.heads_q, h, D);
      stage_tile<Acc, kMaxD>(do_tile, p.dout, p.dtype, w.row0, first, count, p.heads_q, h, D);
    };
    const PartnerDots<Acc, kPerLane> dots{k, q_tile, v, do_tile};  // <K, Q>, <V, dO>
    for_each_tile<kTile>(w, stage_q_do, [&](int first, int count) {
      for_each_visible<false, 2>(p, w, first, count, dots, [&](int t, int i, Acc kq, Acc dprob) {
        const double row_lse = p.lse_in[stat0 + i];
        if (row_lse == -INFINITY) return;  // as the CPU loop (a visible pair has a finite lse)
        const Acc* q_row = q_tile + t * kMaxD;
        const Acc* do_row = do_tile + t * kMaxD;
        const Acc prob = P::exp(scale * kq - Acc(row_lse));
        const Acc prob_r = P::round(prob, p.dtype);
        const Acc ds = P::round(prob * (dprob - Acc(p.delta[stat0 + i])), p.dtype);
#pragma unroll
        for (int e = 0; e < kPerLane; ++e) {
          const int x = lane + 32 * e;
          if (x < D) {
            dv[e] += prob_r * do_row[x];
            dk[e] += scale * ds * q_row[x];
          }
        }
      });
    });
  }
  if (!w.valid) return;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int x = lane + 32 * e;
    if (x < D) {
      p.dk[(w.tok * p.heads_kv + hk) * D + x] = double(P::round(dk[e], p.dtype));
      p.dv[(w.tok * p.heads_kv + hk) * D + x] = double(P::round(dv[e], p.dtype));
    }
  }
}

// ---- host side ---------------------------------------------------------------------------

// Device memory of `count` elements of T, freed on scope exit; not copyable.
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    if (count_ > 0) RINGPACK_CUDA_CHECK(cudaMalloc(&data_, count_ * sizeof(T)));
  }
  DeviceArray(const T* host, size_t count) : DeviceArray(count) {
    if (count_ > 0) {
      RINGPACK_CUDA_CHECK(cudaMemcpy(data_, host, count_ * sizeof(T), cudaMemcpyHostToDevice));
    }
  }
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  void download(std::vector<double>& host) const {
    static_assert(std::is_same_v<T, double>);
    RINGPACK_CHECK(host.size() == count_, "GPU reference: download of ", count_, " elements into ",
                   host.size());
    if (count_ > 0) {
      RINGPACK_CUDA_CHECK(
          cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    }
  }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

struct Sizes {
  size_t tokens = 0;  // b * s
  size_t q = 0;       // b * s * hq * d
  size_t kv = 0;      // b * s * hkv * d
  size_t stat = 0;    // b * hq * s
  explicit Sizes(const AttentionDims& d)
      : tokens(size_t(d.batch) * d.seqlen_q),
        q(tokens * d.num_heads_q * d.head_dim),
        kv(tokens * d.num_heads_kv * d.head_dim),
        stat(tokens * d.num_heads_q) {}
};

void check_problem(const GpuReferenceProblem& p) {
  const AttentionDims& d = p.dims;
  RINGPACK_CHECK(d.batch >= 0 && d.seqlen_q >= 0, "GPU reference: negative size (batch ", d.batch,
                 ", seqlen ", d.seqlen_q, ")");
  RINGPACK_CHECK(d.seqlen_q == d.seqlen_k, "GPU reference: seqlen_q ", d.seqlen_q,
                 " must equal seqlen_k ", d.seqlen_k, " (queries and keys are the same tokens)");
  RINGPACK_CHECK(d.head_dim >= 1 && d.head_dim <= kMaxHeadDim, "GPU reference: head_dim ",
                 d.head_dim, " must be in 1..", kMaxHeadDim);
  RINGPACK_CHECK(d.num_heads_q >= 1 && d.num_heads_kv >= 1 && d.num_heads_q % d.num_heads_kv == 0,
                 "GPU reference: num_heads_q ", d.num_heads_q,
                 " must be a positive multiple of num_heads_kv ", d.num_heads_kv);
  RINGPACK_CHECK(d.batch <= 65535 && d.num_heads_q <= 65535, "GPU reference: batch ", d.batch,
                 " and num_heads_q ", d.num_heads_q, " must be at most 65535 (grid size)");
  const bool empty = d.batch == 0 || d.seqlen_q == 0;
  RINGPACK_CHECK(empty || (p.q && p.k && p.v && p.segment_ids && p.positions),
                 "GPU reference: a null input tensor");
}

// Per token, the index ranges of the partners it walks (see the top of this file):
// key_lo/key_hi as a query, query_lo/query_hi as a key.
struct WalkRanges {
  std::vector<int32_t> key_lo, key_hi, query_lo, query_hi;
};

WalkRanges walk_ranges(const GpuReferenceProblem& p) {
  const int batch = p.dims.batch, seqlen = p.dims.seqlen_q;
  const size_t tokens = size_t(batch) * seqlen;
  WalkRanges r{std::vector<int32_t>(tokens, 0), std::vector<int32_t>(tokens, 0),
               std::vector<int32_t>(tokens, 0), std::vector<int32_t>(tokens, 0)};
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  // Positions are int32: a window beyond 2^40 admits the same pairs as 2^40 (and cannot overflow).
  const int64_t window =
      p.mask.window >= 0 ? std::min<int64_t>(p.mask.window, int64_t(1) << 40) : int64_t(-1);
  const bool causal = p.mask.causal;
  for (int b = 0; b < batch; ++b) {
    const int32_t* seg = p.segment_ids + size_t(b) * seqlen;
    const int32_t* pos = p.positions + size_t(b) * seqlen;
    std::map<int32_t, int> runs;  // runs of each segment id in this row
    for (int start = 0, end = 0; start < seqlen; start = end) {
      for (end = start; end < seqlen && seg[end] == seg[start];) ++end;
      ++runs[seg[start]];
    }
    for (int start = 0, end = 0; start < seqlen; start = end) {
      for (end = start; end < seqlen && seg[end] == seg[start];) ++end;
      if (seg[start] == 0) continue;  // padding sees nothing and is seen by nothing
      const bool one_run = runs[seg[start]] == 1;
      const bool sorted = std::is_sorted(pos + start, pos + end);
      const auto first_at_least = [&](int64_t value) {
        return int32_t(std::lower_bound(pos + start, pos + end, value,
                                        [](int32_t a, int64_t x) { return int64_t(a) < x; }) -
                       pos);
      };
      const auto first_above = [&](int64_t value) {
        return int32_t(std::upper_bound(pos + start, pos + end, value,
                                        [](int64_t x, int32_t a) { return x < int64_t(a); }) -
                       pos);
      };
      for (int t = start; t < end; ++t) {
        const size_t n = size_t(b) * seqlen + t;
        if (!one_run) {  // the id occurs elsewhere in the row too: walk the whole row
          r.key_lo[n] = r.query_lo[n] = 0;
          r.key_hi[n] = r.query_hi[n] = seqlen;
        } else if (!sorted) {  // the whole run
          r.key_lo[n] = r.query_lo[n] = start;
          r.key_hi[n] = r.query_hi[n] = end;
        } else {
          // visible(q, k): pos_k <= pos_q (causal); pos_q - pos_k <= window (and
          // pos_k - pos_q <= window without causal).
          const int64_t at = pos[t];
          const int64_t key_min = window >= 0 ? at - window : kMin;
          const int64_t key_max = causal ? at : (window >= 0 ? at + window : kMax);
          const int64_t query_min = causal ? at : (window >= 0 ? at - window : kMin);
          const int64_t query_max = window >= 0 ? at + window : kMax;
          r.key_lo[n] = first_at_least(key_min);
          r.key_hi[n] = first_above(key_max);
          r.query_lo[n] = first_at_least(query_min);
          r.query_hi[n] = first_above(query_max);
        }
      }
    }
  }
  return r;
}

// The inputs on the device, and Params pointing at them.
struct DeviceInputs {
  DeviceArray<std::byte> q, k, v;
  DeviceArray<int32_t> seg, pos, key_lo, key_hi, query_lo, query_hi;
  Params params;

  DeviceInputs(const GpuReferenceProblem& p, const Sizes& sizes, const WalkRanges& r)
      : q(static_cast<const std::byte*>(p.q), sizes.q * dtype_size(p.dtype)),
        k(static_cast<const std::byte*>(p.k), sizes.kv * dtype_size(p.dtype)),
        v(static_cast<const std::byte*>(p.v), sizes.kv * dtype_size(p.dtype)),
        seg(p.segment_ids, sizes.tokens),
        pos(p.positions, sizes.tokens),
        key_lo(r.key_lo.data(), sizes.tokens),
        key_hi(r.key_hi.data(), sizes.tokens),
        query_lo(r.query_lo.data(), sizes.tokens),
        query_hi(r.query_hi.data(), sizes.tokens) {
    params.seqlen = p.dims.seqlen_q;
    params.heads_q = p.dims.num_heads_q;
    params.heads_kv = p.dims.num_heads_kv;
    params.head_dim = p.dims.head_dim;
    params.group = p.dims.num_heads_q / p.dims.num_heads_kv;
    params.mask = p.mask;
    params.scale = p.scale;
    params.dtype = dtype_code(p.dtype);
    params.q = q.get();
    params.k = k.get();
    params.v = v.get();
    params.seg = seg.get();
    params.pos = pos.get();
    params.key_lo = key_lo.get();
    params.key_hi = key_hi.get();
    params.query_lo = query_lo.get();
    params.query_hi = query_hi.get();
  }
};

// Row-parallel grid: (ceil(s / kWarps), heads, b).
dim3 row_grid(const AttentionDims& d, int heads) {
  return dim3(unsigned((d.seqlen_q + kWarps - 1) / kWarps), unsigned(heads), unsigned(d.batch));
}

template <class Acc, int kPerLane>
void launch_forward(const Params& p, const AttentionDims& d) {
  forward_kernel<Acc, kPerLane><<<row_grid(d, d.num_heads_q), kThreads>>>(p);
  RINGPACK_CHECK_LAUNCH();
}

template <class Acc, int kPerLane>
void launch_backward(const Params& p, const AttentionDims& d) {
  dq_kernel<Acc, kPerLane><<<row_grid(d, d.num_heads_q), kThreads>>>(p);
  RINGPACK_CHECK_LAUNCH();
  dkdv_kernel<Acc, kPerLane><<<row_grid(d, d.num_heads_kv), kThreads>>>(p);
  RINGPACK_CHECK_LAUNCH();
}

template <class Acc>
ReferenceForward forward_on_device(const GpuReferenceProblem& problem) {
  check_problem(problem);
  const AttentionDims& d = problem.dims;
  const Sizes sizes(d);
  ReferenceForward f;
  f.out.assign(sizes.q, 0.0);
  f.lse.assign(sizes.stat, -std::numeric_limits<double>::infinity());
  if (sizes.tokens == 0) return f;

  DeviceInputs in(problem, sizes, walk_ranges(problem));
  DeviceArray<double> out(sizes.q), lse(sizes.stat);
  Params p = in.params;
  p.out = out.get();
  p.lse = lse.get();
  if (d.head_dim <= 64) {
    launch_forward<Acc, 2>(p, d);
  } else if (d.head_dim <= 128) {
    launch_forward<Acc, 4>(p, d);
  } else {
    launch_forward<Acc, 8>(p, d);
  }
  out.download(f.out);
  lse.download(f.lse);
  return f;
}

template <class Acc>
ReferenceGrads backward_on_device(const GpuReferenceProblem& problem, const void* dout,
                                  const ReferenceForward& forward) {
  check_problem(problem);
  const AttentionDims& d = problem.dims;
  const Sizes sizes(d);
  RINGPACK_CHECK(forward.out.size() == sizes.q && forward.lse.size() == sizes.stat,
                 "GPU reference backward: the forward has ", forward.out.size(), " / ",
                 forward.lse.size(), " out / lse elements, expected ", sizes.q, " / ", sizes.stat);
  ReferenceGrads g;
  g.dq.assign(sizes.q, 0.0);
  g.dk.assign(sizes.kv, 0.0);
  g.dv.assign(sizes.kv, 0.0);
  if (sizes.tokens == 0) return g;
  RINGPACK_CHECK(dout != nullptr, "GPU reference backward: null dout");

  DeviceInputs in(problem, sizes, walk_ranges(problem));
  DeviceArray<std::byte> dout_device(static_cast<const std::byte*>(dout),
                                     sizes.q * dtype_size(problem.dtype));
  DeviceArray<double> out(forward.out.data(), sizes.q), lse(forward.lse.data(), sizes.stat);
  DeviceArray<double> delta(sizes.stat), dq(sizes.q), dk(sizes.kv), dv(sizes.kv);
  Params p = in.params;
  p.dout = dout_device.get();
  p.out_in = out.get();
  p.lse_in = lse.get();
  p.delta = delta.get();
  p.dq = dq.get();
  p.dk = dk.get();
  p.dv = dv.get();
  const int64_t rows = int64_t(sizes.stat);
  delta_kernel<Acc><<<unsigned((rows + kThreads - 1) / kThreads), kThreads>>>(p, rows);
  RINGPACK_CHECK_LAUNCH();
  if (d.head_dim <= 64) {
    launch_backward<Acc, 2>(p, d);
  } else if (d.head_dim <= 128) {
    launch_backward<Acc, 4>(p, d);
  } else {
    launch_backward<Acc, 8>(p, d);
  }
  dq.download(g.dq);
  dk.download(g.dk);
  dv.download(g.dv);
  return g;
}

}  // namespace

ReferenceForward gpu_reference_forward(const GpuReferenceProblem& problem) {
  return forward_on_device<double>(problem);
}

ReferenceGrads gpu_reference_backward(const GpuReferenceProblem& problem, const void* dout,
                                      const ReferenceForward& forward) {
  return backward_on_device<double>(problem, dout, forward);
}

ReferenceForward gpu_lowprec_forward(const GpuReferenceProblem& problem) {
  return forward_on_device<float>(problem);
}

ReferenceGrads gpu_lowprec_backward(const GpuReferenceProblem& problem, const void* dout,
                                    const ReferenceForward& low_forward) {
  return backward_on_device<float>(problem, dout, low_forward);
}

}  // namespace ringpack
