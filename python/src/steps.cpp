// forward_step / backward_step: AttentionBackend::forward and ::backward on DLPack arrays, merged
// into the caller's fp32 accumulators (include/ringpack/attention.h); forward_direct (the whole
// attention, out in the dtype) and compute_delta for the single-device op; all on the caller's
// stream.
#include "steps.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>

#include "arrays.h"
#include "backends.h"
#include "ringpack/error.h"

namespace ringpack::python {
namespace {

struct StepArrays {
  View q, k, v, seg_q, pos_q, seg_k, pos_k;
};

// The views of a step whose keys are another block (a CP step): ids and positions of each side.
StepArrays step_arrays(const Array& q, const Array& k, const Array& v, const Array& seg_q,
                       const Array& pos_q, const Array& seg_k, const Array& pos_k) {
  return {view(q, "q"),
          view(k, "k"),
          view(v, "v"),
          view(seg_q, "segment_ids_q"),
          view(pos_q, "positions_q"),
          view(seg_k, "segment_ids_k"),
          view(pos_k, "positions_k")};
}

// The views of a step over one row (the single-device op): the keys' ids are the queries'.
StepArrays step_arrays(const Array& q, const Array& k, const Array& v, const Array& seg,
                       const Array& pos) {
  const View s = view(seg, "segment_ids"), p = view(pos, "positions");
  return {view(q, "q"), view(k, "k"), view(v, "v"), s, p, s, p};
}

// Checks q/k/v and the segment ids and positions of a step; returns the step (pointers set).
AttentionStep make_step(const StepArrays& a, bool causal, int64_t window, float scale) {
  const DType dtype = attention_dtype(a.q);
  expect_shape(a.q, {-1, -1, -1, -1});
  const int batch = a.q.dim(0), seqlen_q = a.q.dim(1), heads_q = a.q.dim(2), dim = a.q.dim(3);
  expect_shape(a.k, {batch, -1, -1, dim});
  const int seqlen_k = a.k.dim(1), heads_kv = a.k.dim(2);
  expect_shape(a.v, {batch, seqlen_k, heads_kv, dim});
  for (const View* t : {&a.k, &a.v}) {
    if (t->element != a.q.element) {
      throw nb::type_error((std::string(t->name) + " is " + element_name(t->element) +
                            " but q is " + element_name(a.q.element) +
                            "; pass q, k and v in one dtype")
                               .c_str());
    }
  }
  for (const View* t : {&a.seg_q, &a.pos_q}) {
    expect_element(*t, Element::kI32);
    expect_shape(*t, {batch, seqlen_q});
  }
  for (const View* t : {&a.seg_k, &a.pos_k}) {
    expect_element(*t, Element::kI32);
    expect_shape(*t, {batch, seqlen_k});
  }
  if (heads_kv < 1 || heads_q % heads_kv != 0) {
    throw nb::value_error(("q has " + std::to_string(heads_q) + " heads and k " +
                           std::to_string(heads_kv) +
                           "; the query heads must be a multiple of the key/value heads (GQA)")
                              .c_str());
  }
  expect_same_place(a.q, {&a.k, &a.v, &a.seg_q, &a.pos_q, &a.seg_k, &a.pos_k});
  AttentionStep step;
  step.dims = {batch, seqlen_q, seqlen_k, heads_q, heads_kv, dim};
  step.dtype = dtype;
  step.mask.causal = causal;
  step.mask.window = window;
  step.scale = scale;
  step.q = a.q.data;
  step.k = a.k.data;
  step.v = a.v.data;
  step.segment_ids_q = static_cast<const int32_t*>(a.seg_q.data);
  step.positions_q = static_cast<const int32_t*>(a.pos_q.data);
  step.segment_ids_k = static_cast<const int32_t*>(a.seg_k.data);
  step.positions_k = static_cast<const int32_t*>(a.pos_k.data);
  return step;
}

void expect_f32(const View& v, std::initializer_list<int64_t> shape, const View& like) {
  expect_element(v, Element::kF32);
  expect_shape(v, shape);
  expect_same_place(like, {&v});
}

BackendKey key_of(const View& q, std::uintptr_t stream, bool deterministic, int threads) {
  return {q.place.cuda, q.place.device, stream, deterministic, threads};
}

void forward_step(const Array& q, const Array& k, const Array& v, const Array& seg_q,
                  const Array& pos_q, const Array& seg_k, const Array& pos_k, const Array& out_acc,
                  const Array& lse_acc, bool causal, int64_t window, float scale,
                  std::uintptr_t stream, int threads) {
  const StepArrays a = step_arrays(q, k, v, seg_q, pos_q, seg_k, pos_k);
  const AttentionStep step = make_step(a, causal, window, scale);
  const View out = view(out_acc, "out_acc"), lse = view(lse_acc, "lse_acc");
  const AttentionDims& d = step.dims;
  expect_f32(out, {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim}, a.q);
  expect_f32(lse, {d.batch, d.num_heads_q, d.seqlen_q}, a.q);
  AttentionBackend& backend = backend_for(key_of(a.q, stream, false, threads));
  backend.check_supported(step.dtype, d.head_dim, false);
  nb::gil_scoped_release release;
  backend.forward(step, {static_cast<float*>(out.data), static_cast<float*>(lse.data)});
}

void forward_direct(const Array& q, const Array& k, const Array& v, const Array& seg,
                    const Array& pos, const Array& out, const Array& lse, bool causal,
                    int64_t window, float scale, std::uintptr_t stream, int threads) {
  const StepArrays a = step_arrays(q, k, v, seg, pos);
  const AttentionStep step = make_step(a, causal, window, scale);
  const View o = view(out, "out"), l = view(lse, "lse");
  const AttentionDims& d = step.dims;
  if (o.element != a.q.element) expect_element(o, a.q.element);
  expect_shape(o, {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim});
  expect_same_place(a.q, {&o});
  expect_f32(l, {d.batch, d.num_heads_q, d.seqlen_q}, a.q);
  AttentionBackend& backend = backend_for(key_of(a.q, stream, false, threads));
  backend.check_supported(step.dtype, d.head_dim, false);
  nb::gil_scoped_release release;
  backend.forward_direct(step, o.data, static_cast<float*>(l.data));
}

void compute_delta(const Array& dout, const Array& out, const Array& delta, std::uintptr_t stream,
                   int threads) {
  const View g = view(dout, "dout"), o = view(out, "out"), dl = view(delta, "delta");
  const DType dtype = attention_dtype(o);
  expect_shape(o, {-1, -1, -1, -1});
  const AttentionDims dims{o.dim(0), o.dim(1), o.dim(1), o.dim(2), o.dim(2), o.dim(3)};
  if (g.element != o.element) expect_element(g, o.element);
  expect_shape(g, {dims.batch, dims.seqlen_q, dims.num_heads_q, dims.head_dim});
  expect_same_place(o, {&g});
  expect_f32(dl, {dims.batch, dims.num_heads_q, dims.seqlen_q}, o);
  AttentionBackend& backend = backend_for(key_of(o, stream, false, threads));
  nb::gil_scoped_release release;
  backend.compute_delta(g.data, o.data, dtype, dims, static_cast<float*>(dl.data));
}

void backward_step(const Array& q, const Array& k, const Array& v, const Array& seg_q,
                   const Array& pos_q, const Array& seg_k, const Array& pos_k, const Array& dout,
                   const Array& lse, const Array& delta, const Array& dq_acc, const Array& dk_acc,
                   const Array& dv_acc, bool causal, int64_t window, float scale,
                   std::uintptr_t stream, int threads, bool deterministic) {
  const StepArrays a = step_arrays(q, k, v, seg_q, pos_q, seg_k, pos_k);
  const AttentionStep step = make_step(a, causal, window, scale);
  const AttentionDims& d = step.dims;
  const View g = view(dout, "dout"), l = view(lse, "lse"), dl = view(delta, "delta");
  const View dq = view(dq_acc, "dq_acc"), dk = view(dk_acc, "dk_acc"), dv = view(dv_acc, "dv_acc");
  if (g.element != a.q.element) expect_element(g, a.q.element);
  expect_shape(g, {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim});
  expect_same_place(a.q, {&g});
  expect_f32(l, {d.batch, d.num_heads_q, d.seqlen_q}, a.q);
  expect_f32(dl, {d.batch, d.num_heads_q, d.seqlen_q}, a.q);
  expect_f32(dq, {d.batch, d.seqlen_q, d.num_heads_q, d.head_dim}, a.q);
  expect_f32(dk, {d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim}, a.q);
  expect_f32(dv, {d.batch, d.seqlen_k, d.num_heads_kv, d.head_dim}, a.q);
  AttentionBackend& backend = backend_for(key_of(a.q, stream, deterministic, threads));
  backend.check_supported(step.dtype, d.head_dim, true);
  nb::gil_scoped_release release;
  backend.backward(
      step, {g.data, static_cast<const float*>(l.data), static_cast<const float*>(dl.data)},
      {static_cast<float*>(dq.data), static_cast<float*>(dk.data), static_cast<float*>(dv.data)});
}

// None when the backend of `device` runs the configuration, else the reason (one line).
std::optional<std::string> unsupported_reason(const std::string& device, int device_index,
                                              const std::string& dtype, int head_dim,
                                              bool backward) {
  if (device != "cpu" && device != "cuda") return "device '" + device + "': use cpu or cuda";
  if (device == "cuda" && !cuda_built()) {
    return std::string(
        "this ringpack was built without CUDA; reinstall on a machine with nvcc "
        "(pip install . with the CUDA toolkit present) or use CPU tensors");
  }
  try {
    BackendKey key;
    key.cuda = device == "cuda";
    key.device = device_index;
    backend_for(key).check_supported(parse_dtype(dtype), head_dim, backward);
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

}  // namespace

void bind_steps(nb::module_& m) {
  using namespace nb::literals;
  m.def("forward_step", &forward_step, "q"_a, "k"_a, "v"_a, "segment_ids_q"_a, "positions_q"_a,
        "segment_ids_k"_a, "positions_k"_a, "out_acc"_a, "lse_acc"_a, "causal"_a, "window"_a,
        "scale"_a, "stream"_a, "threads"_a = 0,
        "Merges softmax(q k^T) v of one key block into the fp32 accumulators out_acc "
        "[B,Sq,Hq,D] and lse_acc [B,Hq,Sq] (initialise 0 and -inf).");
  m.def("forward_direct", &forward_direct, "q"_a, "k"_a, "v"_a, "segment_ids"_a, "positions"_a,
        "out"_a, "lse"_a, "causal"_a, "window"_a, "scale"_a, "stream"_a, "threads"_a = 0,
        "The whole attention of q over k, v (one row of keys per query row): out [B,S,Hq,D] in "
        "q's dtype and lse [B,Hq,S] (fp32), both overwritten.");
  m.def("compute_delta", &compute_delta, "dout"_a, "out"_a, "delta"_a, "stream"_a, "threads"_a = 0,
        "delta [B,Hq,S] (fp32) = rowsum(dout * out) over head_dim.");
  m.def("backward_step", &backward_step, "q"_a, "k"_a, "v"_a, "segment_ids_q"_a, "positions_q"_a,
        "segment_ids_k"_a, "positions_k"_a, "dout"_a, "lse"_a, "delta"_a, "dq_acc"_a, "dk_acc"_a,
        "dv_acc"_a, "causal"_a, "window"_a, "scale"_a, "stream"_a, "threads"_a = 0,
        "deterministic"_a = false,
        "Adds one key block's gradients to the fp32 accumulators dq_acc, dk_acc, dv_acc, given "
        "the final lse and delta = rowsum(dout * out) [B,Hq,Sq].");
  m.def("unsupported_reason", &unsupported_reason, "device"_a, "device_index"_a, "dtype"_a,
        "head_dim"_a, "backward"_a);
  m.def("cuda_built", &cuda_built);
}

}  // namespace ringpack::python
