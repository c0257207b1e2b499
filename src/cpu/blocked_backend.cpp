// The blocked fp32 CPU backend. Inputs (fp32/bf16/fp16) are widened to fp32 once per call; the
// score tile S = Q K^T reads K transposed so every inner loop runs along a contiguous axis.
//
// forward, per work item (row b, q head h, q tile), FlashAttention-2 online softmax over key
// tiles; for each query row i, with running max m, sum l and unnormalised output o:
//   s_j = scale * <Q_i, K_j>     (-inf where rule (1) hides the pair)
//   m'  = max(m, max_j s_j);  c = exp(m - m');  p_j = exp(s_j - m')
//   l   = l * c + sum_j p_j;  o = o * c + sum_j p_j V_j;  m = m'
// epilogue: o_s = o / l, lse_s = m + log(l), merged into the accumulators (lse_merge.h).
//
// backward, from the final lse and delta = <dO, O> (docs/design.md §2):
//   P = exp(s - lse);  dP = dO V^T;  dS = P * (dP - delta)
//   dV += P^T dO;  dK += scale dS^T Q   per work item (row b, kv head, k tile)  (pass 1)
//   dQ += scale dS K                    per work item (row b, q head, q tile)   (pass 2)
// Each item owns the accumulator rows it writes, so the passes need no locks and the result does
// not depend on the thread count; the price is computing P and dS twice.
#include "cpu/blocked_backend.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/lse_merge.h"
#include "core/parallel_for.h"
#include "core/tile_mask.h"
#include "cpu/host_backend.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// 64 x 64 fp32 score tiles (16 KiB) and the K^T / V^T panels they read stay in L1/L2.
constexpr int kTileQ = 64;  // query rows per tile
constexpr int kTileK = 64;  // key columns per tile
constexpr float kMinusInf = -INFINITY;

int tile_count(int length, int tile) {
  return (length + tile - 1) / tile;
}

// A tensor widened to fp32: the input itself when it already is fp32, else a converted copy.
class F32Tensor {
 public:
  F32Tensor(const void* data, DType dtype, size_t count) {
    if (dtype == DType::kF32) {
      data_ = static_cast<const float*>(data);
      return;
    }
    storage_.resize(count);
    for (size_t i = 0; i < count; ++i) storage_[i] = load_element(data, dtype, i);
    data_ = storage_.data();
  }
  // data_ may point into storage_: a copy would point into the original.
  F32Tensor(const F32Tensor&) = delete;
  F32Tensor& operator=(const F32Tensor&) = delete;
  const float* data() const { return data_; }

 private:
  std::vector<float> storage_;
  const float* data_ = nullptr;
};

// x [b, sk, hkv, d] -> [b, hkv, d, sk_padded], zero past seqlen_k: the tile loops then read
// whole 64-wide key panels without a bounds check.
std::vector<float> transpose_keys(const float* x, const AttentionDims& d, int sk_padded) {
  std::vector<float> t(size_t(d.batch) * d.num_heads_kv * d.head_dim * sk_padded, 0.0f);
  for (int b = 0; b < d.batch; ++b) {
    for (int j = 0; j < d.seqlen_k; ++j) {
      for (int h = 0; h < d.num_heads_kv; ++h) {
        const float* src = x + ((size_t(b) * d.seqlen_k + j) * d.num_heads_kv + h) * d.head_dim;
        float* dst = t.data() + (size_t(b) * d.num_heads_kv + h) * d.head_dim * sk_padded + j;
        for (int e = 0; e < d.head_dim; ++e) dst[size_t(e) * sk_padded] = src[e];
      }
    }
  }
  return t;
}

// What every tile loop of one call reads: fp32 inputs, K^T (and V^T for backward), the tile
// ranges of the mask policy, and the index arithmetic.
struct BlockedStep {
  AttentionDims dims;
  MaskSpec mask;
  float scale;
  int group;                        // q heads per kv head
  int tiles_q;                      // per row
  int tiles_k;                      // per row
  int sk_padded;                    // tiles_k * kTileK
  F32Tensor q;                      // [b, sq, hq, d]
  F32Tensor k;                      // [b, sk, hkv, d]
  F32Tensor v;                      // [b, sk, hkv, d]
  std::vector<float> k_t;           // [b, hkv, d, sk_padded]
  std::vector<TileRange> ranges_q;  // [b, tiles_q]
  std::vector<TileRange> ranges_k;  // [b, tiles_k]
  const int32_t* segment_ids_q;     // [b, sq]
  const int32_t* positions_q;
  const int32_t* segment_ids_k;  // [b, sk]
  const int32_t* positions_k;

  explicit BlockedStep(const AttentionStep& step)
      : dims(step.dims),
        mask(step.mask),
        scale(resolve_scale(step.scale, step.dims.head_dim)),
        group(step.dims.num_heads_q / step.dims.num_heads_kv),
        tiles_q(tile_count(step.dims.seqlen_q, kTileQ)),
        tiles_k(tile_count(step.dims.seqlen_k, kTileK)),
        sk_padded(tiles_k * kTileK),
        q(step.q, step.dtype, q_offset(dims.batch, 0, 0)),
        k(step.k, step.dtype, kv_offset(dims.batch, 0, 0)),
        v(step.v, step.dtype, kv_offset(dims.batch, 0, 0)),
        k_t(transpose_keys(k.data(), dims, sk_padded)),
        segment_ids_q(step.segment_ids_q),
        positions_q(step.positions_q),
        segment_ids_k(step.segment_ids_k),
        positions_k(step.positions_k) {
    for (int b = 0; b < dims.batch; ++b) {
      const size_t row_q = size_t(b) * dims.seqlen_q, row_k = size_t(b) * dims.seqlen_k;
      for (int t = 0; t < tiles_q; ++t) {
        ranges_q.push_back(make_tile_range(segment_ids_q + row_q, positions_q + row_q, t * kTileQ,
                                           std::min(dims.seqlen_q, (t + 1) * kTileQ)));
      }
      for (int t = 0; t < tiles_k; ++t) {
        ranges_k.push_back(make_tile_range(segment_ids_k + row_k, positions_k + row_k, t * kTileK,
                                           std::min(dims.seqlen_k, (t + 1) * kTileK)));
      }
    }
  }

  size_t q_offset(int b, int s, int h) const {  // into [b, sq, hq, d]
    return ((size_t(b) * dims.seqlen_q + s) * dims.num_heads_q + h) * dims.head_dim;
  }
  size_t kv_offset(int b, int s, int h) const {  // into [b, sk, hkv, d]
    return ((size_t(b) * dims.seqlen_k + s) * dims.num_heads_kv + h) * dims.head_dim;
  }
  size_t stat_offset(int b, int h, int s) const {  // into [b, hq, sq]
    return (size_t(b) * dims.num_heads_q + h) * dims.seqlen_q + s;
  }
  size_t panel_offset(int b, int h) const {  // into [b, hkv, d, sk_padded]
    return (size_t(b) * dims.num_heads_kv + h) * dims.head_dim * sk_padded;
  }
  TileClass classify(int b, int tile_q, int tile_k) const {
    return classify_tile(ranges_q[size_t(b) * tiles_q + tile_q],
                         ranges_k[size_t(b) * tiles_k + tile_k], mask);
  }
};

// One tile of scaled scores s = scale * Q K^T, [kTileQ, kTileK], of query rows
// [q0, q0 + rows) of head h against keys [k0, k0 + kTileK) of kv head h / group. Pairs hidden by
// rule (1), and key columns past seqlen_k, are -inf; kFull tiles skip the per-element rule.
void score_tile(const BlockedStep& st, const std::vector<float>& key_panels, int b, int h, int q0,
                int rows, int k0, TileClass tile_class, float* __restrict scores) {
  const int D = st.dims.head_dim;
  const float* __restrict panel = key_panels.data() + st.panel_offset(b, h / st.group) + k0;
  const int cols = std::min(kTileK, st.dims.seqlen_k - k0);
  for (int i = 0; i < rows; ++i) {
    const float* __restrict q_row = st.q.data() + st.q_offset(b, q0 + i, h);
    float* __restrict s = scores + i * kTileK;
    std::fill(s, s + kTileK, 0.0f);
    for (int e = 0; e < D; ++e) {
      const float q_e = q_row[e];
      const float* __restrict k_e = panel + size_t(e) * st.sk_padded;  // K^T row e
      for (int j = 0; j < kTileK; ++j) s[j] += q_e * k_e[j];
    }
    for (int j = 0; j < kTileK; ++j) s[j] *= st.scale;
    if (tile_class == TileClass::kPartial) {
      const size_t tok_q = size_t(b) * st.dims.seqlen_q + q0 + i;
      const int32_t seg_q = st.segment_ids_q[tok_q], pos_q = st.positions_q[tok_q];
      for (int j = 0; j < cols; ++j) {
        const size_t tok_k = size_t(b) * st.dims.seqlen_k + k0 + j;
        if (!visible(seg_q, pos_q, st.segment_ids_k[tok_k], st.positions_k[tok_k], st.mask)) {
          s[j] = kMinusInf;
        }
      }
    }
    for (int j = cols; j < kTileK; ++j) s[j] = kMinusInf;
  }
}

// Forward of one work item: query tile `tile_q` of row b, head h, over every key tile.
void forward_item(const BlockedStep& st, const ForwardAccumulators& acc, int b, int h, int tile_q) {
  const int D = st.dims.head_dim;
  const int q0 = tile_q * kTileQ;
  const int rows = std::min(kTileQ, st.dims.seqlen_q - q0);
  std::vector<float> scores(size_t(kTileQ) * kTileK);
  std::vector<float> o(size_t(kTileQ) * D, 0.0f);  // unnormalised output rows
  float row_max[kTileQ], row_sum[kTileQ];
  std::fill(row_max, row_max + kTileQ, kMinusInf);
  std::fill(row_sum, row_sum + kTileQ, 0.0f);

  for (int tile_k = 0; tile_k < st.tiles_k; ++tile_k) {
    const TileClass tile_class = st.classify(b, tile_q, tile_k);
    if (tile_class == TileClass::kSkip) continue;
    const int k0 = tile_k * kTileK;
    score_tile(st, st.k_t, b, h, q0, rows, k0, tile_class, scores.data());
    for (int i = 0; i < rows; ++i) {
      float* s = scores.data() + i * kTileK;
      float m_new = row_max[i];
      for (int j = 0; j < kTileK; ++j) m_new = std::max(m_new, s[j]);
      if (m_new == kMinusInf) continue;                       // nothing visible to this row yet
      const float correction = std::exp(row_max[i] - m_new);  // 0 when row_max was -inf
      float tile_sum = 0.0f;
      for (int j = 0; j < kTileK; ++j) {
        s[j] = std::exp(s[j] - m_new);  // p_j; exp(-inf) = 0 for hidden pairs
        tile_sum += s[j];
      }
      row_sum[i] = row_sum[i] * correction + tile_sum;
      row_max[i] = m_new;
      float* __restrict o_row = o.data() + size_t(i) * D;
      if (correction != 1.0f) {
        for (int e = 0; e < D; ++e) o_row[e] *= correction;
      }
      for (int j = 0; j < kTileK; ++j) {
        if (s[j] == 0.0f) continue;
        const float p = s[j];
        const float* __restrict v_row = st.v.data() + st.kv_offset(b, k0 + j, h / st.group);
        for (int e = 0; e < D; ++e) o_row[e] += p * v_row[e];
      }
    }
  }

  // Epilogue: o_s = o / l, lse_s = m + log(l); rows with no visible key (l = 0) merge as
  // (0, -inf), which leaves the accumulator unchanged, so they are skipped.
  for (int i = 0; i < rows; ++i) {
    if (row_sum[i] == 0.0f) continue;
    float* o_row = o.data() + size_t(i) * D;
    const float inv_sum = 1.0f / row_sum[i];
    for (int e = 0; e < D; ++e) o_row[e] *= inv_sum;
    const float lse_s = row_max[i] + std::log(row_sum[i]);
    lse_merge_row(acc.out + st.q_offset(b, q0 + i, h), acc.lse + st.stat_offset(b, h, q0 + i),
                  o_row, lse_s, D);
  }
}

// The backward-only inputs: dO widened, V^T, and the final lse / delta.
struct BlockedGradInputs {
  F32Tensor dout;          // [b, sq, hq, d]
  std::vector<float> v_t;  // [b, hkv, d, sk_padded]
  const float* lse;        // [b, hq, sq]
  const float* delta;      // [b, hq, sq]
};

// P = exp(s - lse) and dS = P * (dO V^T - delta) of one tile, both [kTileQ, kTileK].
void gradient_tile(const BlockedStep& st, const BlockedGradInputs& g, int b, int h, int q0,
                   int rows, int k0, TileClass tile_class, float* __restrict probs,
                   float* __restrict dscores) {
  const int D = st.dims.head_dim;
  score_tile(st, st.k_t, b, h, q0, rows, k0, tile_class, probs);
  const float* __restrict v_panel = g.v_t.data() + st.panel_offset(b, h / st.group) + k0;
  for (int i = 0; i < rows; ++i) {
    float* __restrict p = probs + i * kTileK;
    float* __restrict ds = dscores + i * kTileK;
    const float lse = g.lse[st.stat_offset(b, h, q0 + i)];
    if (lse == kMinusInf) {  // no visible key in the whole row: zero gradient
      std::fill(p, p + kTileK, 0.0f);
      std::fill(ds, ds + kTileK, 0.0f);
      continue;
    }
    for (int j = 0; j < kTileK; ++j) p[j] = std::exp(p[j] - lse);
    // dP = dO V^T, accumulated in ds.
    std::fill(ds, ds + kTileK, 0.0f);
    const float* __restrict do_row = g.dout.data() + st.q_offset(b, q0 + i, h);
    for (int e = 0; e < D; ++e) {
      const float do_e = do_row[e];
      const float* __restrict v_e = v_panel + size_t(e) * st.sk_padded;  // V^T row e
      for (int j = 0; j < kTileK; ++j) ds[j] += do_e * v_e[j];
    }
    const float delta = g.delta[st.stat_offset(b, h, q0 + i)];
    for (int j = 0; j < kTileK; ++j) ds[j] = p[j] * (ds[j] - delta);
  }
}

// Pass 1: dK and dV of key tile `tile_k` of row b, kv head hk, from every q head of its group.
void dkdv_item(const BlockedStep& st, const BlockedGradInputs& g, const BackwardAccumulators& acc,
               int b, int hk, int tile_k) {
  const int D = st.dims.head_dim;
  const int k0 = tile_k * kTileK;
  const int cols = std::min(kTileK, st.dims.seqlen_k - k0);
  std::vector<float> probs(size_t(kTileQ) * kTileK), dscores(size_t(kTileQ) * kTileK);
  std::vector<float> dk(size_t(kTileK) * D, 0.0f), dv(size_t(kTileK) * D, 0.0f);  // [cols, d]
  for (int h = hk * st.group; h < (hk + 1) * st.group; ++h) {
    for (int tile_q = 0; tile_q < st.tiles_q; ++tile_q) {
      const TileClass tile_class = st.classify(b, tile_q, tile_k);
      if (tile_class == TileClass::kSkip) continue;
      const int q0 = tile_q * kTileQ;
      const int rows = std::min(kTileQ, st.dims.seqlen_q - q0);
      gradient_tile(st, g, b, h, q0, rows, k0, tile_class, probs.data(), dscores.data());
      for (int i = 0; i < rows; ++i) {
        const float* __restrict q_row = st.q.data() + st.q_offset(b, q0 + i, h);
        const float* __restrict do_row = g.dout.data() + st.q_offset(b, q0 + i, h);
        for (int j = 0; j < cols; ++j) {
          const float p = probs[size_t(i) * kTileK + j];
          if (p == 0.0f) continue;  // hidden pair (or underflow): contributes nothing
          const float c = st.scale * dscores[size_t(i) * kTileK + j];
          float* __restrict dv_row = dv.data() + size_t(j) * D;
          float* __restrict dk_row = dk.data() + size_t(j) * D;
          for (int e = 0; e < D; ++e) dv_row[e] += p * do_row[e];  // dV += P^T dO
          for (int e = 0; e < D; ++e) dk_row[e] += c * q_row[e];   // dK += scale dS^T Q
        }
      }
    }
  }
  for (int j = 0; j < cols; ++j) {
    float* dk_out = acc.dk + st.kv_offset(b, k0 + j, hk);
    float* dv_out = acc.dv + st.kv_offset(b, k0 + j, hk);
    for (int e = 0; e < D; ++e) {
      dk_out[e] += dk[size_t(j) * D + e];
      dv_out[e] += dv[size_t(j) * D + e];
    }
  }
}

// Pass 2: dQ of query tile `tile_q` of row b, head h, over every key tile.
void dq_item(const BlockedStep& st, const BlockedGradInputs& g, const BackwardAccumulators& acc,
             int b, int h, int tile_q) {
  const int D = st.dims.head_dim;
  const int q0 = tile_q * kTileQ;
  const int rows = std::min(kTileQ, st.dims.seqlen_q - q0);
  std::vector<float> probs(size_t(kTileQ) * kTileK), dscores(size_t(kTileQ) * kTileK);
  std::vector<float> dq(size_t(kTileQ) * D, 0.0f);  // [rows, d]
  for (int tile_k = 0; tile_k < st.tiles_k; ++tile_k) {
    const TileClass tile_class = st.classify(b, tile_q, tile_k);
    if (tile_class == TileClass::kSkip) continue;
    const int k0 = tile_k * kTileK;
    const int cols = std::min(kTileK, st.dims.seqlen_k - k0);
    gradient_tile(st, g, b, h, q0, rows, k0, tile_class, probs.data(), dscores.data());
    for (int i = 0; i < rows; ++i) {
      float* __restrict dq_row = dq.data() + size_t(i) * D;
      for (int j = 0; j < cols; ++j) {
        const float ds = dscores[size_t(i) * kTileK + j];
        if (ds == 0.0f) continue;
        const float c = st.scale * ds;
        const float* __restrict k_row = st.k.data() + st.kv_offset(b, k0 + j, h / st.group);
        for (int e = 0; e < D; ++e) dq_row[e] += c * k_row[e];  // dQ += scale dS K
      }
    }
  }
  for (int i = 0; i < rows; ++i) {
    float* dq_out = acc.dq + st.q_offset(b, q0 + i, h);
    for (int e = 0; e < D; ++e) dq_out[e] += dq[size_t(i) * D + e];
  }
}

class BlockedBackend final : public HostBackend {
 public:
  explicit BlockedBackend(const BackendOptions& options)
      : num_threads_(resolve_num_threads(options.num_threads)) {}

  std::string name() const override { return "cpu"; }
  void check_supported(DType, int head_dim, bool /*backward*/) const override {
    RINGPACK_CHECK(head_dim >= 1, "cpu backend: head_dim ", head_dim, " must be >= 1");
  }

  void forward(const AttentionStep& step, const ForwardAccumulators& acc) override {
    check_attention_step(step, name());
    const BlockedStep st(step);
    const int64_t per_row = int64_t(st.dims.num_heads_q) * st.tiles_q;
    parallel_for(st.dims.batch * per_row, num_threads_, [&](int64_t item) {
      const int b = int(item / per_row);
      const int h = int(item % per_row / st.tiles_q);
      forward_item(st, acc, b, h, int(item % st.tiles_q));
    });
  }

  void backward(const AttentionStep& step, const BackwardInputs& in,
                const BackwardAccumulators& acc) override {
    check_attention_step(step, name());
    const BlockedStep st(step);
    const BlockedGradInputs g{F32Tensor(in.dout, step.dtype, st.q_offset(st.dims.batch, 0, 0)),
                              transpose_keys(st.v.data(), st.dims, st.sk_padded), in.lse, in.delta};
    const int64_t per_row_k = int64_t(st.dims.num_heads_kv) * st.tiles_k;
    parallel_for(st.dims.batch * per_row_k, num_threads_, [&](int64_t item) {
      const int b = int(item / per_row_k);
      const int hk = int(item % per_row_k / st.tiles_k);
      dkdv_item(st, g, acc, b, hk, int(item % st.tiles_k));
    });
    const int64_t per_row_q = int64_t(st.dims.num_heads_q) * st.tiles_q;
    parallel_for(st.dims.batch * per_row_q, num_threads_, [&](int64_t item) {
      const int b = int(item / per_row_q);
      const int h = int(item % per_row_q / st.tiles_q);
      dq_item(st, g, acc, b, h, int(item % st.tiles_q));
    });
  }

 private:
  int num_threads_;
};

}  // namespace

std::unique_ptr<AttentionBackend> make_blocked_backend(const BackendOptions& options) {
  return std::make_unique<BlockedBackend>(options);
}

}  // namespace ringpack
