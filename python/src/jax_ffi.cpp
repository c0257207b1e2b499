// XLA FFI handlers of ringpack.jax: one forward and one backward attention step
// (include/ringpack/attention.h) as typed-FFI custom calls, for XLA's CPU and CUDA platforms.
//
//   ringpack_forward_step(q, k, v, seg_q, pos_q, seg_k, pos_k, out_acc, lse_acc)
//       -> (out_acc', lse_acc')                        attrs: causal, window, scale
//   ringpack_backward_step(q, k, v, seg_q, pos_q, seg_k, pos_k, dout, lse, delta,
//                          dq_acc, dk_acc, dv_acc) -> (dq_acc', dk_acc', dv_acc')
//
// and, for the single-device op, the whole attention of one row and the backward's delta:
//
//   ringpack_forward_direct(q, k, v, seg, pos) -> (out in q's dtype, lse)  attrs: as above
//   ringpack_compute_delta(dout, out) -> delta = rowsum(dout * out) [B, Hq, S] (fp32)
//
// The steps' outputs are the accumulators merged into (forward) or added to (backward):
// ringpack.jax aliases each to its input (input_output_aliases), so the step updates them in place.
// Where XLA did not alias (it may copy instead), the handler first copies the input accumulator to
// the output, on the step's stream, then runs the step on the output.
//
// ringpack.jax checks dtypes and shapes before it calls these; the checks here guard against
// other callers and return an XLA error with a one-line message instead of crashing.
#include "jax_ffi.h"

#include <nanobind/nanobind.h>

#ifdef RINGPACK_WITH_XLA_FFI

#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "backends.h"
#include "ringpack/attention.h"
#include "ringpack/error.h"
#include "xla/ffi/api/ffi.h"

#ifdef RINGPACK_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ringpack::python {
namespace {

namespace ffi = xla::ffi;

// A malformed argument: becomes INVALID_ARGUMENT.
struct BadArgument : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A configuration the backend cannot run: becomes UNIMPLEMENTED.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* ffi_dtype_name(ffi::DataType t) {
  switch (t) {
    case ffi::DataType::F32:
      return "float32";
    case ffi::DataType::BF16:
      return "bfloat16";
    case ffi::DataType::F16:
      return "float16";
    case ffi::DataType::F64:
      return "float64";
    case ffi::DataType::PRED:
      return "bool";
    case ffi::DataType::S8:
      return "int8";
    case ffi::DataType::S16:
      return "int16";
    case ffi::DataType::S32:
      return "int32";
    case ffi::DataType::S64:
      return "int64";
    case ffi::DataType::U8:
      return "uint8";
    case ffi::DataType::U16:
      return "uint16";
    case ffi::DataType::U32:
      return "uint32";
    case ffi::DataType::U64:
      return "uint64";
    default:
      return "an unsupported dtype";
  }
}

std::string shape_of(const ffi::AnyBuffer& b) {
  std::string s = "[";
  const auto dims = b.dimensions();
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

void expect(const ffi::AnyBuffer& b, const char* name, ffi::DataType dtype,
            std::initializer_list<int64_t> shape) {
  if (b.element_type() != dtype) {
    throw BadArgument(std::string(name) + " is " + ffi_dtype_name(b.element_type()) +
                      "; pass it as " + ffi_dtype_name(dtype));
  }
  const auto dims = b.dimensions();
  bool ok = dims.size() == shape.size();
  size_t i = 0;
  for (int64_t want : shape) {
    if (!ok) break;
    ok = want < 0 || dims[i] == want;
    ++i;
  }
  if (!ok) {
    std::string want = "[";
    i = 0;
    for (int64_t w : shape)
      want += (i++ ? ", " : "") + (w < 0 ? std::string("*") : std::to_string(w));
    throw BadArgument(std::string(name) + " has shape " + shape_of(b) + "; expected " + want + "]");
  }
}

DType attention_dtype(const ffi::AnyBuffer& q) {
  switch (q.element_type()) {
    case ffi::DataType::F32:
      return DType::kF32;
    case ffi::DataType::BF16:
      return DType::kBF16;
    case ffi::DataType::F16:
      return DType::kF16;
    default:
      throw BadArgument(std::string("q is ") + ffi_dtype_name(q.element_type()) +
                        "; pass q, k and v as float32, bfloat16 or float16");
  }
}

struct StepArgs {
  ffi::AnyBuffer q, k, v, seg_q, pos_q, seg_k, pos_k;
};

// Checks q/k/v and the segment ids and positions; returns the step with its pointers set.
AttentionStep make_step(const StepArgs& a, bool causal, int64_t window, float scale) {
  if (a.q.dimensions().size() != 4) {
    throw BadArgument("q has shape " + shape_of(a.q) + "; expected [batch, seq, heads, head_dim]");
  }
  const DType dtype = attention_dtype(a.q);
  const auto qd = a.q.dimensions();
  const int64_t batch = qd[0], seqlen_q = qd[1], heads_q = qd[2], dim = qd[3];
  expect(a.k, "k", a.q.element_type(), {batch, -1, -1, dim});
  const int64_t seqlen_k = a.k.dimensions()[1], heads_kv = a.k.dimensions()[2];
  expect(a.v, "v", a.q.element_type(), {batch, seqlen_k, heads_kv, dim});
  expect(a.seg_q, "segment_ids_q", ffi::DataType::S32, {batch, seqlen_q});
  expect(a.pos_q, "positions_q", ffi::DataType::S32, {batch, seqlen_q});
  expect(a.seg_k, "segment_ids_k", ffi::DataType::S32, {batch, seqlen_k});
  expect(a.pos_k, "positions_k", ffi::DataType::S32, {batch, seqlen_k});
  if (heads_kv < 1 || heads_q % heads_kv != 0) {
    throw BadArgument("q has " + std::to_string(heads_q) + " heads and k " +
                      std::to_string(heads_kv) +
                      "; the query heads must be a multiple of the key/value heads (GQA)");
  }
  AttentionStep step;
  step.dims = {int(batch), int(seqlen_q), int(seqlen_k), int(heads_q), int(heads_kv), int(dim)};
  step.dtype = dtype;
  step.mask.causal = causal;
  step.mask.window = window;
  step.scale = scale;
  step.q = a.q.untyped_data();
  step.k = a.k.untyped_data();
  step.v = a.v.untyped_data();
  step.segment_ids_q = static_cast<const int32_t*>(a.seg_q.untyped_data());
  step.positions_q = static_cast<const int32_t*>(a.pos_q.untyped_data());
  step.segment_ids_k = static_cast<const int32_t*>(a.seg_k.untyped_data());
  step.positions_k = static_cast<const int32_t*>(a.pos_k.untyped_data());
  return step;
}

// Where a handler runs: the backend and, on CUDA, its stream.
struct StepPlace {
  bool cuda = false;
  void* stream = nullptr;  // cudaStream_t on CUDA
};

AttentionBackend& backend_of(const StepPlace& place) {
  BackendKey key;
  key.cuda = place.cuda;
#ifdef RINGPACK_WITH_CUDA
  if (place.cuda) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) throw std::runtime_error("cudaGetDevice failed");
    key.device = device;
    key.stream = reinterpret_cast<std::uintptr_t>(place.stream);
  }
#endif
  return backend_for(key);
}

void check_supported(AttentionBackend& backend, DType dtype, int head_dim, bool backward) {
  try {
    backend.check_supported(dtype, head_dim, backward);
  } catch (const Error& e) {
    throw Unsupported(e.what());
  }
}

// Makes `out` hold `in` when XLA gave them separate buffers (no aliasing).
void alias_or_copy(const StepPlace& place, const ffi::AnyBuffer& in,
                   ffi::Result<ffi::AnyBuffer>& out) {
  void* dst = out->untyped_data();
  const void* src = in.untyped_data();
  if (dst == src || in.size_bytes() == 0) return;
  if (out->size_bytes() != in.size_bytes()) {
    throw BadArgument("an output accumulator has shape " + shape_of(*out) + " but its input " +
                      shape_of(in) + "; give the outputs the inputs' shapes");
  }
#ifdef RINGPACK_WITH_CUDA
  if (place.cuda) {
    const cudaError_t status = cudaMemcpyAsync(dst, src, in.size_bytes(), cudaMemcpyDeviceToDevice,
                                               static_cast<cudaStream_t>(place.stream));
    if (status != cudaSuccess) {
      throw std::runtime_error(std::string("copying an accumulator failed: ") +
                               cudaGetErrorString(status));
    }
    return;
  }
#endif
  std::memcpy(dst, src, in.size_bytes());
}

template <class Body>
ffi::Error guarded(const char* target, Body&& body) {
  try {
    body();
    return ffi::Error::Success();
  } catch (const BadArgument& e) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, std::string(target) + ": " + e.what());
  } catch (const Unsupported& e) {
    return ffi::Error(ffi::ErrorCode::kUnimplemented, std::string(target) + ": " + e.what());
  } catch (const Error& e) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, std::string(target) + ": " + e.what());
  } catch (const std::exception& e) {
    return ffi::Error(ffi::ErrorCode::kInternal, std::string(target) + ": " + e.what());
  } catch (...) {
    return ffi::Error(ffi::ErrorCode::kInternal, std::string(target) + ": unknown exception");
  }
}

ffi::Error forward_step(const StepPlace& place, ffi::AnyBuffer q, ffi::AnyBuffer k,
                        ffi::AnyBuffer v, ffi::AnyBuffer seg_q, ffi::AnyBuffer pos_q,
                        ffi::AnyBuffer seg_k, ffi::AnyBuffer pos_k, ffi::AnyBuffer out_in,
                        ffi::AnyBuffer lse_in, ffi::Result<ffi::AnyBuffer> out,
                        ffi::Result<ffi::AnyBuffer> lse, bool causal, int64_t window, float scale) {
  return guarded("ringpack_forward_step", [&] {
    const AttentionStep step =
        make_step({q, k, v, seg_q, pos_q, seg_k, pos_k}, causal, window, scale);
    const AttentionDims& d = step.dims;
    expect(out_in, "out_acc", ffi::DataType::F32, {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim});
    expect(lse_in, "lse_acc", ffi::DataType::F32, {d.batch, d.num_heads_q, d.seqlen_q});
    expect(*out, "out", ffi::DataType::F32, {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim});
    expect(*lse, "lse", ffi::DataType::F32, {d.batch, d.num_heads_q, d.seqlen_q});
    AttentionBackend& backend = backend_of(place);
    check_supported(backend, step.dtype, d.head_dim, false);
    alias_or_copy(place, out_in, out);
    alias_or_copy(place, lse_in, lse);
    backend.forward(
        step, {static_cast<float*>(out->untyped_data()), static_cast<float*>(lse->untyped_data())});
  });
}

ffi::Error backward_step(const StepPlace& place, ffi::AnyBuffer q, ffi::AnyBuffer k,
                         ffi::AnyBuffer v, ffi::AnyBuffer seg_q, ffi::AnyBuffer pos_q,
                         ffi::AnyBuffer seg_k, ffi::AnyBuffer pos_k, ffi::AnyBuffer dout,
                         ffi::AnyBuffer lse, ffi::AnyBuffer delta, ffi::AnyBuffer dq_in,
                         ffi::AnyBuffer dk_in, ffi::AnyBuffer dv_in, ffi::Result<ffi::AnyBuffer> dq,
                         ffi::Result<ffi::AnyBuffer> dk, ffi::Result<ffi::AnyBuffer> dv,
                         bool causal, int64_t window, float scale) {
  return guarded("ringpack_backward_step", [&] {
    const AttentionStep step =
        make_step({q, k, v, seg_q, pos_q, seg_k, pos_k}, causal, window, scale);
    const AttentionDims& d = step.dims;
    const std::initializer_list<int64_t> q_shape{d.batch, d.seqlen_q, d.num_heads_q, d.head_dim};
    const std::initializer_list<int64_t> k_shape{d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim};
    const std::initializer_list<int64_t> row_shape{d.batch, d.num_heads_q, d.seqlen_q};
    expect(dout, "dout", q.element_type(), q_shape);
    expect(lse, "lse", ffi::DataType::F32, row_shape);
    expect(delta, "delta", ffi::DataType::F32, row_shape);
    expect(dq_in, "dq_acc", ffi::DataType::F32, q_shape);
    expect(dk_in, "dk_acc", ffi::DataType::F32, k_shape);
    expect(dv_in, "dv_acc", ffi::DataType::F32, k_shape);
    expect(*dq, "dq", ffi::DataType::F32, q_shape);
    expect(*dk, "dk", ffi::DataType::F32, k_shape);
    expect(*dv, "dv", ffi::DataType::F32, k_shape);
    AttentionBackend& backend = backend_of(place);
    check_supported(backend, step.dtype, d.head_dim, true);
    alias_or_copy(place, dq_in, dq);
    alias_or_copy(place, dk_in, dk);
    alias_or_copy(place, dv_in, dv);
    backend.backward(
        step,
        {dout.untyped_data(), static_cast<const float*>(lse.untyped_data()),
         static_cast<const float*>(delta.untyped_data())},
        {static_cast<float*>(dq->untyped_data()), static_cast<float*>(dk->untyped_data()),
         static_cast<float*>(dv->untyped_data())});
  });
}

ffi::Error forward_direct(const StepPlace& place, ffi::AnyBuffer q, ffi::AnyBuffer k,
                          ffi::AnyBuffer v, ffi::AnyBuffer seg, ffi::AnyBuffer pos,
                          ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> lse,
                          bool causal, int64_t window, float scale) {
  return guarded("ringpack_forward_direct", [&] {
    const AttentionStep step = make_step({q, k, v, seg, pos, seg, pos}, causal, window, scale);
    const AttentionDims& d = step.dims;
    expect(*out, "out", q.element_type(), {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim});
    expect(*lse, "lse", ffi::DataType::F32, {d.batch, d.num_heads_q, d.seqlen_q});
    AttentionBackend& backend = backend_of(place);
    check_supported(backend, step.dtype, d.head_dim, false);
    backend.forward_direct(step, out->untyped_data(), static_cast<float*>(lse->untyped_data()));
  });
}

ffi::Error compute_delta(const StepPlace& place, ffi::AnyBuffer dout, ffi::AnyBuffer out,
                         ffi::Result<ffi::AnyBuffer> delta) {
  return guarded("ringpack_compute_delta", [&] {
    if (out.dimensions().size() != 4) {
      throw BadArgument("out has shape " + shape_of(out) +
                        "; expected [batch, seq, heads, head_dim]");
    }
    const DType dtype = attention_dtype(out);
    const auto od = out.dimensions();
    const AttentionDims dims{int(od[0]), int(od[1]), int(od[1]),
                             int(od[2]), int(od[2]), int(od[3])};
    expect(dout, "dout", out.element_type(), {od[0], od[1], od[2], od[3]});
    expect(*delta, "delta", ffi::DataType::F32, {od[0], od[2], od[1]});
    backend_of(place).compute_delta(dout.untyped_data(), out.untyped_data(), dtype, dims,
                                    static_cast<float*>(delta->untyped_data()));
  });
}

// ---- the CPU platform ----------------------------------------------------------------------

ffi::Error forward_cpu(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer seg_q,
                       ffi::AnyBuffer pos_q, ffi::AnyBuffer seg_k, ffi::AnyBuffer pos_k,
                       ffi::AnyBuffer out_in, ffi::AnyBuffer lse_in,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> lse,
                       bool causal, int64_t window, float scale) {
  return forward_step(StepPlace{}, q, k, v, seg_q, pos_q, seg_k, pos_k, out_in, lse_in, out, lse,
                      causal, window, scale);
}

ffi::Error backward_cpu(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v, ffi::AnyBuffer seg_q,
                        ffi::AnyBuffer pos_q, ffi::AnyBuffer seg_k, ffi::AnyBuffer pos_k,
                        ffi::AnyBuffer dout, ffi::AnyBuffer lse, ffi::AnyBuffer delta,
                        ffi::AnyBuffer dq_in, ffi::AnyBuffer dk_in, ffi::AnyBuffer dv_in,
                        ffi::Result<ffi::AnyBuffer> dq, ffi::Result<ffi::AnyBuffer> dk,
                        ffi::Result<ffi::AnyBuffer> dv, bool causal, int64_t window, float scale) {
  return backward_step(StepPlace{}, q, k, v, seg_q, pos_q, seg_k, pos_k, dout, lse, delta, dq_in,
                       dk_in, dv_in, dq, dk, dv, causal, window, scale);
}

ffi::Error forward_direct_cpu(ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                              ffi::AnyBuffer seg, ffi::AnyBuffer pos,
                              ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> lse,
                              bool causal, int64_t window, float scale) {
  return forward_direct(StepPlace{}, q, k, v, seg, pos, out, lse, causal, window, scale);
}

ffi::Error compute_delta_cpu(ffi::AnyBuffer dout, ffi::AnyBuffer out,
                             ffi::Result<ffi::AnyBuffer> delta) {
  return compute_delta(StepPlace{}, dout, out, delta);
}

// The bindings, in the order of the handlers' parameters: `n` >= 1 buffers, `n` >= 1 results,
// and the mask attributes by name. (A Binding cannot be moved, only extended, hence the
// references and the recursion that ends at one.)
template <int n, class Binding>
auto buffers(Binding&& binding) {
  if constexpr (n == 1) {
    return std::move(binding).template Arg<ffi::AnyBuffer>();
  } else {
    return buffers<n - 1>(std::move(binding).template Arg<ffi::AnyBuffer>());
  }
}

template <int n, class Binding>
auto results(Binding&& binding) {
  if constexpr (n == 1) {
    return std::move(binding).template Ret<ffi::AnyBuffer>();
  } else {
    return results<n - 1>(std::move(binding).template Ret<ffi::AnyBuffer>());
  }
}

template <class Binding>
auto mask_attrs(Binding&& binding) {
  return std::move(binding)
      .template Attr<bool>("causal")
      .template Attr<int64_t>("window")
      .template Attr<float>("scale");
}

// q, k, v, 4 ids/positions, 2 accumulators -> out, lse
template <class Binding>
auto forward_step_binding(Binding&& binding) {
  return mask_attrs(results<2>(buffers<9>(std::move(binding))));
}

// q, k, v, 4 ids/positions, dout, lse, delta, 3 accumulators -> dq, dk, dv
template <class Binding>
auto backward_step_binding(Binding&& binding) {
  return mask_attrs(results<3>(buffers<13>(std::move(binding))));
}

// q, k, v, segment ids, positions -> out, lse
template <class Binding>
auto forward_direct_binding(Binding&& binding) {
  return mask_attrs(results<2>(buffers<5>(std::move(binding))));
}

// dout, out -> delta
template <class Binding>
auto compute_delta_binding(Binding&& binding) {
  return results<1>(buffers<2>(std::move(binding)));
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RingpackForwardStepCpu, forward_cpu,
                              forward_step_binding(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(RingpackBackwardStepCpu, backward_cpu,
                              backward_step_binding(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(RingpackForwardDirectCpu, forward_direct_cpu,
                              forward_direct_binding(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(RingpackComputeDeltaCpu, compute_delta_cpu,
                              compute_delta_binding(ffi::Ffi::Bind()));

// ---- the CUDA platform ---------------------------------------------------------------------

#ifdef RINGPACK_WITH_CUDA
namespace {

ffi::Error forward_cuda(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                        ffi::AnyBuffer seg_q, ffi::AnyBuffer pos_q, ffi::AnyBuffer seg_k,
                        ffi::AnyBuffer pos_k, ffi::AnyBuffer out_in, ffi::AnyBuffer lse_in,
                        ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> lse,
                        bool causal, int64_t window, float scale) {
  return forward_step(StepPlace{true, stream}, q, k, v, seg_q, pos_q, seg_k, pos_k, out_in, lse_in,
                      out, lse, causal, window, scale);
}

ffi::Error backward_cuda(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k, ffi::AnyBuffer v,
                         ffi::AnyBuffer seg_q, ffi::AnyBuffer pos_q, ffi::AnyBuffer seg_k,
                         ffi::AnyBuffer pos_k, ffi::AnyBuffer dout, ffi::AnyBuffer lse,
                         ffi::AnyBuffer delta, ffi::AnyBuffer dq_in, ffi::AnyBuffer dk_in,
                         ffi::AnyBuffer dv_in, ffi::Result<ffi::AnyBuffer> dq,
                         ffi::Result<ffi::AnyBuffer> dk, ffi::Result<ffi::AnyBuffer> dv,
                         bool causal, int64_t window, float scale) {
  return backward_step(StepPlace{true, stream}, q, k, v, seg_q, pos_q, seg_k, pos_k, dout, lse,
                       delta, dq_in, dk_in, dv_in, dq, dk, dv, causal, window, scale);
}

ffi::Error forward_direct_cuda(cudaStream_t stream, ffi::AnyBuffer q, ffi::AnyBuffer k,
                               ffi::AnyBuffer v, ffi::AnyBuffer seg, ffi::AnyBuffer pos,
                               ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> lse,
                               bool causal, int64_t window, float scale) {
  return forward_direct(StepPlace{true, stream}, q, k, v, seg, pos, out, lse, causal, window,
                        scale);
}

ffi::Error compute_delta_cuda(cudaStream_t stream, ffi::AnyBuffer dout, ffi::AnyBuffer out,
                              ffi::Result<ffi::AnyBuffer> delta) {
  return compute_delta(StepPlace{true, stream}, dout, out, delta);
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RingpackForwardStepCuda, forward_cuda,
    forward_step_binding(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RingpackBackwardStepCuda, backward_cuda,
    backward_step_binding(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RingpackForwardDirectCuda, forward_direct_cuda,
    forward_direct_binding(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(
    RingpackComputeDeltaCuda, compute_delta_cuda,
    compute_delta_binding(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>()));
#endif  // RINGPACK_WITH_CUDA

namespace {

nanobind::capsule capsule(XLA_FFI_Error* (*handler)(XLA_FFI_CallFrame*)) {
  return nanobind::capsule(reinterpret_cast<void*>(handler));
}

}  // namespace

void bind_jax_ffi(nanobind::module_& m) {
  m.def(
      "xla_ffi_targets",
      []() {
        nanobind::dict forward, backward, direct, delta, targets;
        forward["cpu"] = capsule(RingpackForwardStepCpu);
        backward["cpu"] = capsule(RingpackBackwardStepCpu);
        direct["cpu"] = capsule(RingpackForwardDirectCpu);
        delta["cpu"] = capsule(RingpackComputeDeltaCpu);
#ifdef RINGPACK_WITH_CUDA
        forward["CUDA"] = capsule(RingpackForwardStepCuda);
        backward["CUDA"] = capsule(RingpackBackwardStepCuda);
        direct["CUDA"] = capsule(RingpackForwardDirectCuda);
        delta["CUDA"] = capsule(RingpackComputeDeltaCuda);
#endif
        targets["ringpack_forward_step"] = forward;
        targets["ringpack_backward_step"] = backward;
        targets["ringpack_forward_direct"] = direct;
        targets["ringpack_compute_delta"] = delta;
        return targets;
      },
      "The XLA FFI handlers of ringpack.jax: {target name: {platform: PyCapsule}}.");
}

}  // namespace ringpack::python

#else  // !RINGPACK_WITH_XLA_FFI

namespace ringpack::python {

void bind_jax_ffi(nanobind::module_& m) {
  m.def(
      "xla_ffi_targets", []() { return nanobind::dict(); },
      "Empty: this build did not find jaxlib's XLA FFI headers (python/CMakeLists.txt).");
}

}  // namespace ringpack::python

#endif  // RINGPACK_WITH_XLA_FFI
