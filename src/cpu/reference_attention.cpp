// The fp64 reference attention and its low-precision twin: naive loops over (row, head, query,
// key), equations (1)-(4) of docs/design.md §2 and the gradients below them.
#include "cpu/reference_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/parallel_for.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// Flat offsets into the problem's tensors.
struct Indexer {
  AttentionDims d;
  int group() const { return d.num_heads_q / d.num_heads_kv; }  // q heads per kv head
  size_t q(int b, int s, int h) const {                         // [b, sq, hq, d]
    return ((size_t(b) * d.seqlen_q + s) * d.num_heads_q + h) * d.head_dim;
  }
  size_t k(int b, int s, int h) const {  // [b, sk, hkv, d]
    return ((size_t(b) * d.seqlen_k + s) * d.num_heads_kv + h) * d.head_dim;
  }
  size_t stat(int b, int h, int s) const {  // [b, hq, sq]
    return (size_t(b) * d.num_heads_q + h) * d.seqlen_q + s;
  }
  size_t tok_q(int b, int s) const { return size_t(b) * d.seqlen_q + s; }
  size_t tok_k(int b, int s) const { return size_t(b) * d.seqlen_k + s; }
  size_t q_elems() const { return q(d.batch, 0, 0); }
  size_t k_elems() const { return k(d.batch, 0, 0); }
  size_t stat_elems() const { return size_t(d.batch) * d.num_heads_q * d.seqlen_q; }
};

void check_problem(const ReferenceProblem& p) {
  const AttentionDims& d = p.dims;
  RINGPACK_CHECK(d.batch >= 0 && d.seqlen_q >= 0 && d.seqlen_k >= 0,
                 "reference attention: negative size (batch ", d.batch, ", seqlen_q ", d.seqlen_q,
                 ", seqlen_k ", d.seqlen_k, ")");
  RINGPACK_CHECK(d.head_dim >= 1, "reference attention: head_dim ", d.head_dim, " must be >= 1");
  RINGPACK_CHECK(d.num_heads_q >= 1 && d.num_heads_kv >= 1 && d.num_heads_q % d.num_heads_kv == 0,
                 "reference attention: num_heads_q ", d.num_heads_q,
                 " must be a positive multiple of num_heads_kv ", d.num_heads_kv);
}

// The keys visible from query i of row b, in key order (rule (1)).
std::vector<int> visible_keys(const ReferenceProblem& p, const Indexer& ix, int b, int i) {
  std::vector<int> keys;
  const int32_t seg_q = p.segment_ids_q[ix.tok_q(b, i)];
  const int32_t pos_q = p.positions_q[ix.tok_q(b, i)];
  for (int j = 0; j < p.dims.seqlen_k; ++j) {
    if (visible(seg_q, pos_q, p.segment_ids_k[ix.tok_k(b, j)], p.positions_k[ix.tok_k(b, j)],
                p.mask)) {
      keys.push_back(j);
    }
  }
  return keys;
}

// The arithmetic of one precision: fp64 for the reference; fp32 with rounding of P, dS and the
// outputs to `dtype` for the low-precision baseline. Acc is the accumulation type.
template <class Acc>
struct Precision {
  DType dtype;
  bool round_products;  // round P and dS to dtype before they multiply V, dO, K, Q
  Acc round_product(Acc x) const { return round_products ? Acc(round_to(dtype, float(x))) : x; }
  double round_output(Acc x) const { return round_products ? round_to(dtype, float(x)) : x; }
};

// s(q, k) = scale * <Q[q], K[k]>, in Acc.
template <class Acc>
Acc score(const ReferenceProblem& p, const Indexer& ix, int b, int i, int h, int j) {
  const double* q = p.q + ix.q(b, i, h);
  const double* k = p.k + ix.k(b, j, h / ix.group());
  Acc dot = 0;
  for (int x = 0; x < p.dims.head_dim; ++x) dot += Acc(q[x]) * Acc(k[x]);
  return Acc(p.scale) * dot;
}

template <class Acc>
ReferenceForward forward_impl(const ReferenceProblem& p, const Precision<Acc>& prec) {
  check_problem(p);
  const Indexer ix{p.dims};
  const int D = p.dims.head_dim;
  ReferenceForward f;
  f.out.assign(ix.q_elems(), 0.0);
  f.lse.assign(ix.stat_elems(), kMinusInf);
  std::vector<Acc> s, o(D);
  for (int b = 0; b < p.dims.batch; ++b) {
    for (int i = 0; i < p.dims.seqlen_q; ++i) {
      const std::vector<int> keys = visible_keys(p, ix, b, i);
      if (keys.empty()) continue;  // no visible key: O = 0, lse = -inf
      for (int h = 0; h < p.dims.num_heads_q; ++h) {
        // (2) the scores of the visible keys.
        s.resize(keys.size());
        for (size_t n = 0; n < keys.size(); ++n) s[n] = score<Acc>(p, ix, b, i, h, keys[n]);
        // (3) lse = log sum exp(s), taken around the row maximum.
        const Acc row_max = *std::max_element(s.begin(), s.end());
        Acc sum = 0;
        for (const Acc sn : s) sum += std::exp(sn - row_max);
        const Acc lse = row_max + std::log(sum);
        // (4) O = sum exp(s - lse) V.
        std::fill(o.begin(), o.end(), Acc(0));
        for (size_t n = 0; n < keys.size(); ++n) {
          const Acc prob = prec.round_product(std::exp(s[n] - lse));
          const double* v = p.v + ix.k(b, keys[n], h / ix.group());
          for (int x = 0; x < D; ++x) o[x] += prob * Acc(v[x]);
        }
        for (int x = 0; x < D; ++x) f.out[ix.q(b, i, h) + x] = prec.round_output(o[x]);
        f.lse[ix.stat(b, h, i)] = double(lse);
      }
    }
  }
  return f;
}

// dV[k] += P dO[q];  dS = P (<dO[q], V[k]> - delta[q]);  dQ[q] += scale dS K[k];
// dK[k] += scale dS Q[q];  P = exp(s - lse). Sums in Acc; outputs rounded by prec.
template <class Acc>
ReferenceGrads backward_impl(const ReferenceProblem& p, const double* dout, const double* lse,
                             const double* delta, const Precision<Acc>& prec) {
  check_problem(p);
  const Indexer ix{p.dims};
  const int D = p.dims.head_dim;
  std::vector<Acc> dq(ix.q_elems(), Acc(0)), dk(ix.k_elems(), Acc(0)), dv(ix.k_elems(), Acc(0));
  for (int b = 0; b < p.dims.batch; ++b) {
    for (int i = 0; i < p.dims.seqlen_q; ++i) {
      const std::vector<int> keys = visible_keys(p, ix, b, i);
      for (int h = 0; h < p.dims.num_heads_q; ++h) {
        const int hk = h / ix.group();
        const double row_lse = lse[ix.stat(b, h, i)];
        if (row_lse == kMinusInf) continue;  // no visible key in the whole row: zero gradient
        const Acc row_delta = Acc(delta[ix.stat(b, h, i)]);
        const double* q = p.q + ix.q(b, i, h);
        const double* d_o = dout + ix.q(b, i, h);
        for (const int j : keys) {
          const double* k = p.k + ix.k(b, j, hk);
          const double* v = p.v + ix.k(b, j, hk);
          const Acc prob = std::exp(score<Acc>(p, ix, b, i, h, j) - Acc(row_lse));
          Acc dprob = 0;  // <dO[q], V[k]>
          for (int x = 0; x < D; ++x) dprob += Acc(d_o[x]) * Acc(v[x]);
          const Acc prob_r = prec.round_product(prob);
          const Acc ds = prec.round_product(prob * (dprob - row_delta));
          const Acc scale = Acc(p.scale);
          Acc* dq_row = dq.data() + ix.q(b, i, h);
          Acc* dk_row = dk.data() + ix.k(b, j, hk);
          Acc* dv_row = dv.data() + ix.k(b, j, hk);
          for (int x = 0; x < D; ++x) {
            dv_row[x] += prob_r * Acc(d_o[x]);
            dq_row[x] += scale * ds * Acc(k[x]);
            dk_row[x] += scale * ds * Acc(q[x]);
          }
        }
      }
    }
  }
  ReferenceGrads g;
  g.dq.resize(dq.size());
  g.dk.resize(dk.size());
  g.dv.resize(dv.size());
  for (size_t i = 0; i < dq.size(); ++i) g.dq[i] = prec.round_output(dq[i]);
  for (size_t i = 0; i < dk.size(); ++i) g.dk[i] = prec.round_output(dk[i]);
  for (size_t i = 0; i < dv.size(); ++i) g.dv[i] = prec.round_output(dv[i]);
  return g;
}

// delta[b][h][s] = <dO, O> of each row, in Acc.
template <class Acc>
std::vector<double> row_delta(const ReferenceProblem& p, const double* dout,
                              const std::vector<double>& out) {
  const Indexer ix{p.dims};
  std::vector<double> delta(ix.stat_elems(), 0.0);
  for (int b = 0; b < p.dims.batch; ++b) {
    for (int h = 0; h < p.dims.num_heads_q; ++h) {
      for (int i = 0; i < p.dims.seqlen_q; ++i) {
        Acc sum = 0;
        for (int x = 0; x < p.dims.head_dim; ++x) {
          sum += Acc(dout[ix.q(b, i, h) + x]) * Acc(out[ix.q(b, i, h) + x]);
        }
        delta[ix.stat(b, h, i)] = double(sum);
      }
    }
  }
  return delta;
}

}  // namespace

ReferenceForward reference_forward(const ReferenceProblem& problem) {
  return forward_impl<double>(problem, Precision<double>{DType::kF32, false});
}

ReferenceGrads reference_backward(const ReferenceProblem& problem, const double* dout,
                                  const ReferenceForward& forward) {
  const std::vector<double> delta = row_delta<double>(problem, dout, forward.out);
  return backward_impl<double>(problem, dout, forward.lse.data(), delta.data(),
                               Precision<double>{DType::kF32, false});
}

ReferenceGrads reference_backward_from_stats(const ReferenceProblem& problem, const double* dout,
                                             const double* lse, const double* delta) {
  return backward_impl<double>(problem, dout, lse, delta, Precision<double>{DType::kF32, false});
}

ReferenceForward lowprec_forward(const ReferenceProblem& problem, DType dtype) {
  return forward_impl<float>(problem, Precision<float>{dtype, true});
}

ReferenceGrads lowprec_backward(const ReferenceProblem& problem, const double* dout, DType dtype) {
  const ReferenceForward forward = lowprec_forward(problem, dtype);
  const std::vector<double> delta = row_delta<float>(problem, dout, forward.out);
  return backward_impl<float>(problem, dout, forward.lse.data(), delta.data(),
                              Precision<float>{dtype, true});
}

std::vector<double> to_double(const void* data, DType dtype, size_t count) {
  std::vector<double> result(count);
  parallel_for_blocks(count, size_t(1) << 20, [&](size_t begin, size_t end, uint64_t) {
    for (size_t i = begin; i < end; ++i) result[i] = double(load_element(data, dtype, i));
  });
  return result;
}

}  // namespace ringpack
