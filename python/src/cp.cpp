#include "cp.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "backends.h"
#include "comm/nccl_communicator.h"
#include "ringpack/cp.h"
#include "ringpack/error.h"
#include "ringpack/layout.h"
#include "ringpack/plan.h"

namespace ringpack::python {
namespace {

// A host communicator whose transfers a Python object performs (the CP schedules call it from
// the thread that called cp_forward/cp_backward, which holds the GIL). The object has
//   isend(buf, peer) / irecv(buf, peer) -> request with .wait()
//   all_gather(send, recv); reduce_scatter_sum(send, recv); barrier()
// where buf/send/recv are 1-D numpy views (uint8, or float32 for reduce_scatter_sum) of the
// schedule's buffers, valid until the request was waited for (or the call returned).
class PythonCommunicator final : public Communicator {
 public:
  PythonCommunicator(int rank, int size, nb::object transport, double timeout)
      : rank_(rank), size_(size), transport_(std::move(transport)), timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::unique_ptr<CommRequest> isend(const void* data, size_t bytes, int peer) override {
    bytes_sent_ += bytes;
    return std::make_unique<Request>(
        transport_.attr("isend")(bytes_view(const_cast<void*>(data), bytes), peer));
  }
  std::unique_ptr<CommRequest> irecv(void* data, size_t bytes, int peer) override {
    return std::make_unique<Request>(transport_.attr("irecv")(bytes_view(data, bytes), peer));
  }
  void all_gather(const void* send, void* recv, size_t bytes) override {
    bytes_sent_ += bytes * size_t(size_ - 1);
    transport_.attr("all_gather")(bytes_view(const_cast<void*>(send), bytes),
                                  bytes_view(recv, bytes * size_t(size_)));
  }
  void reduce_scatter_sum(const float* send, float* recv, size_t count) override {
    bytes_sent_ += count * sizeof(float) * size_t(size_ - 1);
    transport_.attr("reduce_scatter_sum")(float_view(const_cast<float*>(send), count * size_),
                                          float_view(recv, count));
  }
  void barrier() override { transport_.attr("barrier")(); }
  uint64_t bytes_sent() const override { return bytes_sent_; }
  double timeout_seconds() const override { return timeout_; }

 private:
  class Request final : public CommRequest {
   public:
    explicit Request(nb::object work) : work_(std::move(work)) {}
    void wait() override {
      if (!work_.is_valid()) return;
      nb::object work = std::move(work_);
      if (!work.is_none()) work.attr("wait")();
    }

   private:
    nb::object work_;
  };

  static nb::object bytes_view(void* data, size_t bytes) {
    return nb::cast(nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(data, {bytes}, nb::handle()),
                    nb::rv_policy::reference);  // a view, not a copy
  }
  static nb::object float_view(float* data, size_t count) {
    return nb::cast(nb::ndarray<nb::numpy, float, nb::ndim<1>>(data, {count}, nb::handle()),
                    nb::rv_policy::reference);
  }

  int rank_, size_;
  nb::object transport_;
  double timeout_;
  uint64_t bytes_sent_ = 0;
};

// A communicator and the backend its schedules run on.
struct CpGroup {
  AttentionBackend* backend = nullptr;
  std::unique_ptr<Communicator> comm;
  bool python_transport = false;  // the schedules call back into Python: keep the GIL
};

CpGroup nccl_group(nb::bytes unique_id, int rank, int size, int device, std::uintptr_t stream,
                   double timeout) {
  if (unique_id.size() != kNcclUniqueIdBytes) {
    throw nb::value_error(("the NCCL unique id has " + std::to_string(unique_id.size()) +
                           " bytes; pass the " + std::to_string(kNcclUniqueIdBytes) +
                           " bytes of nccl_unique_id() from one rank")
                              .c_str());
  }
  CpGroup group;
  group.backend = &backend_for({true, device, stream, false, 0});
  nb::gil_scoped_release release;
  group.comm =
      make_nccl_communicator_from_id(unique_id.c_str(), rank, size, *group.backend, timeout);
  return group;
}

CpGroup python_group(int rank, int size, nb::object transport, double timeout, int threads) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw nb::value_error(("rank " + std::to_string(rank) + " of " + std::to_string(size) +
                           ": a rank must lie in [0, size)")
                              .c_str());
  }
  CpGroup group;
  group.backend = &backend_for({false, 0, 0, false, threads});
  group.comm = std::make_unique<PythonCommunicator>(rank, size, std::move(transport), timeout);
  group.python_transport = true;
  return group;
}

nb::bytes nccl_unique_id() {
  const NcclUniqueId id = make_nccl_unique_id();
  return nb::bytes(reinterpret_cast<const char*>(id.data()), id.size());
}

// The shard of this rank: q/k/v [B, n, H, D], segment ids and positions [B, n].
ShardInputs shard_inputs(const CpGroup& group, const View& q, const View& k, const View& v,
                         const View& seg, const View& pos, bool causal, int64_t window, float scale,
                         const std::vector<bool>& step_visible) {
  const DType dtype = attention_dtype(q);
  expect_shape(q, {-1, -1, -1, -1});
  const int batch = q.dim(0), n = q.dim(1), heads_q = q.dim(2), dim = q.dim(3);
  expect_shape(k, {batch, n, -1, dim});
  expect_shape(v, {batch, n, k.dim(2), dim});
  for (const View* t : {&k, &v}) {
    if (t->element != q.element) expect_element(*t, q.element);
  }
  for (const View* t : {&seg, &pos}) {
    expect_element(*t, Element::kI32);
    expect_shape(*t, {batch, n});
  }
  expect_same_place(q, {&k, &v, &seg, &pos});
  const bool cuda = group.backend->memory_space() == MemorySpace::kDevice;
  if (q.place.cuda != cuda) {
    throw nb::value_error((std::string("q is on ") + (q.place.cuda ? "a GPU" : "the CPU") +
                           " but this CP group runs on " + (cuda ? "a GPU" : "the CPU") +
                           "; pass tensors on the group's device")
                              .c_str());
  }
  if (k.dim(2) < 1 || heads_q % k.dim(2) != 0) {
    throw nb::value_error(("q has " + std::to_string(heads_q) + " heads and k " +
                           std::to_string(k.dim(2)) +
                           "; the query heads must be a multiple of the key/value heads (GQA)")
                              .c_str());
  }
  ShardInputs in;
  in.dims = {batch, n, n, heads_q, k.dim(2), dim};
  in.dtype = dtype;
  in.mask.causal = causal;
  in.mask.window = window;
  in.scale = scale;
  in.q = q.data;
  in.k = k.data;
  in.v = v.data;
  in.segment_ids = static_cast<const int32_t*>(seg.data);
  in.positions = static_cast<const int32_t*>(pos.data);
  in.step_visible = step_visible;
  return in;
}

void expect_like(const View& t, const View& like, Element element) {
  expect_element(t, element);
  expect_same_place(like, {&t});
}

// Runs a schedule call without the GIL, unless its transfers call back into Python.
template <class Schedule>
void run_schedule(const CpGroup& group, const Schedule& schedule) {
  if (group.python_transport) {
    schedule();
  } else {
    nb::gil_scoped_release release;
    schedule();
  }
}

void cp_forward_py(CpGroup& group, const std::string& strategy, const Array& q, const Array& k,
                   const Array& v, const Array& seg, const Array& pos, const Array& out,
                   const Array& lse, bool causal, int64_t window, float scale,
                   const std::vector<bool>& step_visible) {
  const View vq = view(q, "q"), vk = view(k, "k"), vv = view(v, "v");
  const View vs = view(seg, "segment_ids"), vp = view(pos, "positions");
  const ShardInputs in =
      shard_inputs(group, vq, vk, vv, vs, vp, causal, window, scale, step_visible);
  const View vo = view(out, "out"), vl = view(lse, "lse");
  expect_like(vo, vq, vq.element);
  expect_shape(vo, {in.dims.batch, in.dims.seqlen_q, in.dims.num_heads_q, in.dims.head_dim});
  expect_like(vl, vq, Element::kF32);
  expect_shape(vl, {in.dims.batch, in.dims.num_heads_q, in.dims.seqlen_q});
  group.backend->check_supported(in.dtype, in.dims.head_dim, false);
  const Strategy s = parse_strategy(strategy);
  ScheduleStats stats;
  const ForwardOutputs outputs{vo.data, static_cast<float*>(vl.data)};
  run_schedule(group, [&] { cp_forward(s, in, *group.backend, *group.comm, outputs, stats); });
}

void cp_backward_py(CpGroup& group, const std::string& strategy, const Array& q, const Array& k,
                    const Array& v, const Array& seg, const Array& pos, const Array& out,
                    const Array& lse, const Array& dout, const Array& dq, const Array& dk,
                    const Array& dv, bool causal, int64_t window, float scale,
                    const std::vector<bool>& step_visible) {
  const View vq = view(q, "q"), vk = view(k, "k"), vv = view(v, "v");
  const View vs = view(seg, "segment_ids"), vp = view(pos, "positions");
  const ShardInputs in =
      shard_inputs(group, vq, vk, vv, vs, vp, causal, window, scale, step_visible);
  const View vo = view(out, "out"), vl = view(lse, "lse"), vg = view(dout, "dout");
  const View vdq = view(dq, "dq"), vdk = view(dk, "dk"), vdv = view(dv, "dv");
  for (const View* t : {&vo, &vg, &vdq}) {
    expect_like(*t, vq, vq.element);
    expect_shape(*t, {in.dims.batch, in.dims.seqlen_q, in.dims.num_heads_q, in.dims.head_dim});
  }
  for (const View* t : {&vdk, &vdv}) {
    expect_like(*t, vq, vq.element);
    expect_shape(*t, {in.dims.batch, in.dims.seqlen_k, in.dims.num_heads_kv, in.dims.head_dim});
  }
  expect_like(vl, vq, Element::kF32);
  expect_shape(vl, {in.dims.batch, in.dims.num_heads_q, in.dims.seqlen_q});
  group.backend->check_supported(in.dtype, in.dims.head_dim, true);
  const Strategy s = parse_strategy(strategy);
  ScheduleStats stats;
  const BackwardOutputs grads{vdq.data, vdk.data, vdv.data};
  const auto* lse_data = static_cast<const float*>(vl.data);
  run_schedule(group, [&] {
    cp_backward(s, in, vo.data, lse_data, vg.data, *group.backend, *group.comm, grads, stats);
  });
}

using IntArray = nb::ndarray<nb::numpy, int32_t>;

IntArray to_numpy(std::vector<int32_t> values, std::vector<size_t> shape) {
  auto* owned = new std::vector<int32_t>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<int32_t>*>(p); });
  return IntArray(owned->data(), shape.size(), shape.data(), owner);
}

std::vector<int32_t> host_ints(const Array& array, const char* name, int batch, int seq_len) {
  const View v = view(array, name);
  expect_element(v, Element::kI32);
  expect_shape(v, {batch, seq_len});
  if (v.place.cuda) {
    throw nb::value_error((std::string(name) + " is on a GPU; pass it on the CPU (plan() reads "
                                               "the layout on the host)")
                              .c_str());
  }
  const auto* data = static_cast<const int32_t*>(v.data);
  return std::vector<int32_t>(data, data + size_t(batch) * seq_len);
}

// The reorder of a batch for cp ranks: (index [S], label, explanation, positions [B, S],
// step_visible [cp][cp]). `reorder` is auto or a label (contiguous, dual_chunk_swap, striped,
// striped:64); positions None derives 0, 1, 2, ... per segment.
std::tuple<IntArray, std::string, std::string, IntArray, std::vector<std::vector<bool>>>
plan_reorder(const Array& segment_ids, std::optional<Array> positions, int cp,
             const std::string& reorder, const std::string& strategy, bool causal, int64_t window,
             int heads_q, int heads_kv, int head_dim, int dtype_bytes) {
  const View s = view(segment_ids, "segment_ids");
  expect_shape(s, {-1, -1});
  PackedBatch batch;
  batch.batch = s.dim(0);
  batch.seq_len = s.dim(1);
  batch.segment_ids = host_ints(segment_ids, "segment_ids", batch.batch, batch.seq_len);
  batch.positions = positions ? host_ints(*positions, "positions", batch.batch, batch.seq_len)
                              : derive_positions(batch.segment_ids, batch.batch, batch.seq_len);
  validate_batch(batch);
  if (cp < 1) throw nb::value_error(("cp = " + std::to_string(cp) + ": use cp >= 1").c_str());
  PlanConfig config;
  config.cp = cp;
  config.strategy = parse_strategy(strategy);
  config.mask.causal = causal;
  config.mask.window = window;
  config.num_heads_q = heads_q;
  config.num_heads_kv = heads_kv;
  config.head_dim = head_dim;
  config.dtype_bytes = dtype_bytes;
  std::string explanation;
  const ReorderSpec spec =
      resolve_reorder(batch, parse_reorder_label(reorder), config, &explanation);
  const ReorderAnalysis analysis = analyse_reorder(batch, spec, config);
  std::vector<std::vector<bool>> visible(size_t(cp), std::vector<bool>(size_t(cp), true));
  for (int r = 0; r < cp; ++r) {
    for (int src = 0; src < cp; ++src) visible[r][src] = analysis.step_pairs[r][src] > 0;
  }
  std::vector<size_t> batch_shape{size_t(batch.batch), size_t(batch.seq_len)};
  return {to_numpy(reorder_index(batch.seq_len, cp, spec), {size_t(batch.seq_len)}),
          reorder_label(spec), explanation, to_numpy(std::move(batch.positions), batch_shape),
          visible};
}

}  // namespace

void bind_cp(nb::module_& m) {
  using namespace nb::literals;
  nb::class_<CpGroup>(m, "CpGroup")
      .def_prop_ro("rank", [](const CpGroup& g) { return g.comm->rank(); })
      .def_prop_ro("size", [](const CpGroup& g) { return g.comm->size(); })
      .def_prop_ro("bytes_sent", [](const CpGroup& g) { return g.comm->bytes_sent(); });
  m.def("nccl_available", &nccl_available);
  m.def("nccl_unique_id", &nccl_unique_id);
  m.def("nccl_group", &nccl_group, "unique_id"_a, "rank"_a, "size"_a, "device"_a, "stream"_a,
        "timeout"_a);
  m.def("python_group", &python_group, "rank"_a, "size"_a, "transport"_a, "timeout"_a,
        "threads"_a = 0);
  m.def("cp_forward", &cp_forward_py, "group"_a, "strategy"_a, "q"_a, "k"_a, "v"_a, "segment_ids"_a,
        "positions"_a, "out"_a, "lse"_a, "causal"_a, "window"_a, "scale"_a, "step_visible"_a);
  m.def("cp_backward", &cp_backward_py, "group"_a, "strategy"_a, "q"_a, "k"_a, "v"_a,
        "segment_ids"_a, "positions"_a, "out"_a, "lse"_a, "dout"_a, "dq"_a, "dk"_a, "dv"_a,
        "causal"_a, "window"_a, "scale"_a, "step_visible"_a);
  m.def("plan_reorder", &plan_reorder, "segment_ids"_a, "positions"_a.none(), "cp"_a, "reorder"_a,
        "strategy"_a, "causal"_a, "window"_a, "heads_q"_a, "heads_kv"_a, "head_dim"_a,
        "dtype_bytes"_a);
}

}  // namespace ringpack::python
