// The reference backend: one CP step = reference_forward / reference_backward_from_stats over the
// step's keys (reference_attention.h), merged into the fp32 accumulators (docs/design.md §4).
#include "cpu/reference_backend.h"

#include <vector>

#include "core/lse_merge.h"
#include "cpu/host_backend.h"
#include "cpu/reference_attention.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

size_t q_elements(const AttentionDims& d) {
  return size_t(d.batch) * d.seqlen_q * d.num_heads_q * d.head_dim;
}
size_t kv_elements(const AttentionDims& d) {
  return size_t(d.batch) * d.seqlen_k * d.num_heads_kv * d.head_dim;
}
size_t stat_elements(const AttentionDims& d) {
  return size_t(d.batch) * d.num_heads_q * d.seqlen_q;
}

// The step's inputs widened to fp64, and the problem that points at them.
struct WideStep {
  std::vector<double> q, k, v;
  ReferenceProblem problem;

  explicit WideStep(const AttentionStep& step)
      : q(to_double(step.q, step.dtype, q_elements(step.dims))),
        k(to_double(step.k, step.dtype, kv_elements(step.dims))),
        v(to_double(step.v, step.dtype, kv_elements(step.dims))) {
    problem.dims = step.dims;
    problem.mask = step.mask;
    problem.scale = double(resolve_scale(step.scale, step.dims.head_dim));
    problem.q = q.data();
    problem.k = k.data();
    problem.v = v.data();
    problem.segment_ids_q = step.segment_ids_q;
    problem.positions_q = step.positions_q;
    problem.segment_ids_k = step.segment_ids_k;
    problem.positions_k = step.positions_k;
  }
};

class ReferenceBackend final : public HostBackend {
 public:
  std::string name() const override { return "reference"; }
  void check_supported(DType, int head_dim, bool /*backward*/) const override {
    RINGPACK_CHECK(head_dim >= 1, "reference backend: head_dim ", head_dim, " must be >= 1");
  }

  void forward(const AttentionStep& step, const ForwardAccumulators& acc) override {
    check_attention_step(step, name());
    const AttentionDims& d = step.dims;
    const WideStep wide(step);
    const ReferenceForward part = reference_forward(wide.problem);
    std::vector<float> o_s(d.head_dim);
    for (int b = 0; b < d.batch; ++b) {
      for (int s = 0; s < d.seqlen_q; ++s) {
        for (int h = 0; h < d.num_heads_q; ++h) {
          const size_t row = ((size_t(b) * d.seqlen_q + s) * d.num_heads_q + h) * d.head_dim;
          const size_t stat = (size_t(b) * d.num_heads_q + h) * d.seqlen_q + s;
          for (int x = 0; x < d.head_dim; ++x) o_s[x] = float(part.out[row + x]);
          lse_merge_row(acc.out + row, acc.lse + stat, o_s.data(), float(part.lse[stat]),
                        d.head_dim);
        }
      }
    }
  }

  void backward(const AttentionStep& step, const BackwardInputs& in,
                const BackwardAccumulators& acc) override {
    check_attention_step(step, name());
    const AttentionDims& d = step.dims;
    const WideStep wide(step);
    const std::vector<double> dout = to_double(in.dout, step.dtype, q_elements(d));
    const std::vector<double> lse(in.lse, in.lse + stat_elements(d));
    const std::vector<double> delta(in.delta, in.delta + stat_elements(d));
    const ReferenceGrads grads =
        reference_backward_from_stats(wide.problem, dout.data(), lse.data(), delta.data());
    for (size_t i = 0; i < grads.dq.size(); ++i) acc.dq[i] += float(grads.dq[i]);
    for (size_t i = 0; i < grads.dk.size(); ++i) acc.dk[i] += float(grads.dk[i]);
    for (size_t i = 0; i < grads.dv.size(); ++i) acc.dv[i] += float(grads.dv[i]);
  }
};

}  // namespace

std::unique_ptr<AttentionBackend> make_reference_backend(const BackendOptions&) {
  return std::make_unique<ReferenceBackend>();
}

}  // namespace ringpack
