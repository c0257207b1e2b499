// verify_run: fp64 reference and low-precision baseline on the whole row, then compare_tensor.
// The reference is the CPU one (src/cpu/reference_attention.h) or, for the CUDA backend, the GPU
// one (src/cuda/reference/reference_attention.h): the same sums on the same inputs.
#include "job/verify.h"

#include <algorithm>
#include <functional>

#include "core/compare.h"
#include "cpu/reference_attention.h"
#include "ringpack/error.h"
#ifdef RINGPACK_WITH_CUDA
#include "cuda/reference/reference_attention.h"
#endif

namespace ringpack {
namespace {

// The four computations of one reference; the low-precision ones only for bf16/fp16.
struct Judge {
  std::function<ReferenceForward()> forward;
  std::function<ReferenceForward()> low_forward;
  std::function<ReferenceGrads(const ReferenceForward& forward)> backward;
  std::function<ReferenceGrads(const ReferenceForward& low_forward)> low_backward;
};

}  // namespace

VerifyReference verify_reference_for(BackendKind backend) {
#ifdef RINGPACK_WITH_CUDA
  if (backend == BackendKind::kCuda) return VerifyReference::kGpu;
#endif
  return VerifyReference::kCpu;
}

const char* verify_reference_name(VerifyReference reference) {
  return reference == VerifyReference::kGpu ? "gpu fp64" : "cpu fp64";
}

VerifyChoice choose_verification(std::optional<bool> requested, double work, bool cheap) {
  VerifyChoice choice;
  choice.verify = requested.value_or(cheap || work <= kAutoVerifyWorkLimit);
  if (!choice.verify) {
    choice.note = requested.has_value() ? "verification off (--no-verify)"
                                        : "verification off by default for this size (the fp64 "
                                          "reference would take long); pass --verify to force it";
  }
  return choice;
}

bool all_passed(const std::vector<TensorError>& errors) {
  return !errors.empty() &&
         std::all_of(errors.begin(), errors.end(), [](const TensorError& e) { return e.passed; });
}

std::vector<TensorError> verify_run(const PackedBatch& batch, const BatchOptions& options,
                                    const RowTensors& t, bool backward, const ProgressFn& progress,
                                    VerifyReference reference) {
  const DType dtype = options.dtype;
  const int b = batch.batch, s = batch.seq_len;
  const size_t q_count = size_t(b) * s * options.num_heads_q * options.head_dim;
  const AttentionDims dims{b, s, s, options.num_heads_q, options.num_heads_kv, options.head_dim};
  const double scale = resolve_scale(0.0f, options.head_dim);

  // CPU reference: the inputs widened to double.
  std::vector<double> q, k, v, dout;
  ReferenceProblem problem;
  Judge judge;
  if (reference == VerifyReference::kCpu) {
    const size_t kv_count = size_t(b) * s * options.num_heads_kv * options.head_dim;
    q = to_double(t.q.data(), dtype, q_count);
    k = to_double(t.k.data(), dtype, kv_count);
    v = to_double(t.v.data(), dtype, kv_count);
    if (backward) dout = to_double(t.dout.data(), dtype, q_count);
    problem.dims = dims;
    problem.mask = options.mask;
    problem.scale = scale;
    problem.q = q.data();
    problem.k = k.data();
    problem.v = v.data();
    problem.segment_ids_q = problem.segment_ids_k = batch.segment_ids.data();
    problem.positions_q = problem.positions_k = batch.positions.data();
    judge.forward = [&] { return reference_forward(problem); };
    judge.low_forward = [&] { return lowprec_forward(problem, dtype); };
    judge.backward = [&](const ReferenceForward& f) {
      return reference_backward(problem, dout.data(), f);
    };
    // lowprec_backward recomputes its forward.
    judge.low_backward = [&](const ReferenceForward&) {
      return lowprec_backward(problem, dout.data(), dtype);
    };
  } else {
#ifdef RINGPACK_WITH_CUDA
    GpuReferenceProblem gpu;
    gpu.dims = dims;
    gpu.mask = options.mask;
    gpu.scale = scale;
    gpu.dtype = dtype;
    gpu.q = t.q.data();
    gpu.k = t.k.data();
    gpu.v = t.v.data();
    gpu.segment_ids = batch.segment_ids.data();
    gpu.positions = batch.positions.data();
    judge.forward = [gpu] { return gpu_reference_forward(gpu); };
    judge.low_forward = [gpu] { return gpu_lowprec_forward(gpu); };
    judge.backward = [gpu, &t](const ReferenceForward& f) {
      return gpu_reference_backward(gpu, t.dout.data(), f);
    };
    judge.low_backward = [gpu, &t](const ReferenceForward& low) {
      return gpu_lowprec_backward(gpu, t.dout.data(), low);
    };
#else
    RINGPACK_FAIL("the GPU reference needs a build with CUDA");
#endif
  }
  const std::string name = verify_reference_name(reference);

  const bool low_precision = dtype != DType::kF32;
  if (progress) progress("verifying: " + name + " reference forward");
  const ReferenceForward ref = judge.forward();
  ReferenceForward base;
  if (low_precision) {
    if (progress) progress("verifying: " + name + " reference forward in " + dtype_name(dtype));
    base = judge.low_forward();
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

  if (progress) progress("verifying: " + name + " reference backward");
  const ReferenceGrads grads = judge.backward(ref);
  ReferenceGrads base_grads;
  if (low_precision) {
    if (progress) progress("verifying: " + name + " reference backward in " + dtype_name(dtype));
    base_grads = judge.low_backward(base);
  }
  auto compare = [&](const char* tensor, const HostTensor& got, const std::vector<double>& expected,
                     const std::vector<double>& baseline, const std::vector<int64_t>& shape) {
    errors.push_back(compare_tensor(tensor, to_double(got.data(), dtype, expected.size()), expected,
                                    low_precision ? &baseline : nullptr, dtype, shape,
                                    bshd_axis_names()));
  };
  compare("dq", t.dq, grads.dq, base_grads.dq, bshd_q);
  compare("dk", t.dk, grads.dk, base_grads.dk, bshd_kv);
  compare("dv", t.dv, grads.dv, base_grads.dv, bshd_kv);
  return errors;
}

}  // namespace ringpack
