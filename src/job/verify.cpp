// verify_run: fp64 reference and low-precision baseline on the whole row, then compare_tensor.
#include "job/verify.h"

#include "core/compare.h"
#include "cpu/reference_attention.h"

namespace ringpack {

std::vector<TensorError> verify_run(const PackedBatch& batch, const BatchOptions& options,
                                    const RowTensors& t, bool backward,
                                    const ProgressFn& progress) {
  const DType dtype = options.dtype;
  const int b = batch.batch, s = batch.seq_len;
  const size_t q_count = size_t(b) * s * options.num_heads_q * options.head_dim;
  const size_t kv_count = size_t(b) * s * options.num_heads_kv * options.head_dim;
  const std::vector<double> q = to_double(t.q.data(), dtype, q_count);
  const std::vector<double> k = to_double(t.k.data(), dtype, kv_count);
  const std::vector<double> v = to_double(t.v.data(), dtype, kv_count);
  const std::vector<double> dout = to_double(t.dout.data(), dtype, q_count);

  ReferenceProblem problem;
  problem.dims = {b, s, s, options.num_heads_q, options.num_heads_kv, options.head_dim};
  problem.mask = options.mask;
  problem.scale = resolve_scale(0.0f, options.head_dim);
  problem.q = q.data();
  problem.k = k.data();
  problem.v = v.data();
  problem.segment_ids_q = problem.segment_ids_k = batch.segment_ids.data();
  problem.positions_q = problem.positions_k = batch.positions.data();

  const bool low_precision = dtype != DType::kF32;
  if (progress) progress("verifying: fp64 reference forward");
  const ReferenceForward ref = reference_forward(problem);
  ReferenceForward base;
  if (low_precision) {
    if (progress) progress(std::string("verifying: reference forward in ") + dtype_name(dtype));
    base = lowprec_forward(problem, dtype);
  }
  const std::vector<int64_t> bshd_q{b, s, options.num_heads_q, options.head_dim};
  const std::vector<int64_t> bshd_kv{b, s, options.num_heads_kv, options.head_dim};
  const std::vector<int64_t> lse_shape{b, options.num_heads_q, s};

  std::vector<TensorError> errors;
  errors.push_back(compare_tensor("out", to_double(t.out.data(), dtype, q_count), ref.out,
                                  low_precision ? &base.out : nullptr, dtype, bshd_q,
                                  bshd_axis_names()));
  errors.push_back(compare_tensor("lse", to_double(t.lse.data(), DType::kF32, ref.lse.size()),
                                  ref.lse, low_precision ? &base.lse : nullptr, DType::kF32,
                                  lse_shape, lse_axis_names()));
  if (!backward) return errors;

  if (progress) progress("verifying: fp64 reference backward");
  const ReferenceGrads grads = reference_backward(problem, dout.data(), ref);
  ReferenceGrads base_grads;
  if (low_precision) {
    if (progress) progress(std::string("verifying: reference backward in ") + dtype_name(dtype));
    base_grads = lowprec_backward(problem, dout.data(), dtype);
  }
  auto compare = [&](const char* name, const HostTensor& got, const std::vector<double>& expected,
                     const std::vector<double>& baseline, const std::vector<int64_t>& shape) {
    errors.push_back(compare_tensor(name, to_double(got.data(), dtype, expected.size()), expected,
                                    low_precision ? &baseline : nullptr, dtype, shape,
                                    bshd_axis_names()));
  };
  compare("dq", t.dq, grads.dq, base_grads.dq, bshd_q);
  compare("dk", t.dk, grads.dk, base_grads.dk, bshd_kv);
  compare("dv", t.dv, grads.dv, base_grads.dv, bshd_kv);
  return errors;
}

}  // namespace ringpack
