// bench_kernels (ringpack/job.h): one backend's forward and backward timed on a whole row, then
// one fresh pass compared with the fp64 reference through verify_run.
#include <algorithm>
#include <string>
#include <vector>

#include "core/pair_count.h"
#include "cp/device_buffer.h"
#include "job/backend_transfers.h"
#include "job/rank_runner.h"
#include "job/verify.h"
#include "ringpack/error.h"
#include "ringpack/job.h"
#ifdef RINGPACK_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ringpack {
namespace {

KernelTiming summarize(std::vector<double> ms) {
  KernelTiming t;
  if (ms.empty()) return t;
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  t.median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  return t;
}

// Per-repetition times of fn() after `warmup` untimed calls, from marks on the backend's stream.
template <class Fn>
KernelTiming time_reps(AttentionBackend& backend, int warmup, int reps, Fn&& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  const std::unique_ptr<Timeline> timeline = backend.make_timeline();
  std::vector<std::pair<size_t, size_t>> marks;
  marks.reserve(size_t(reps));
  for (int i = 0; i < reps; ++i) {
    const size_t start = timeline->mark(backend.stream());
    fn();
    marks.emplace_back(start, timeline->mark(backend.stream()));
  }
  backend.synchronize();
  std::vector<double> ms;
  ms.reserve(marks.size());
  for (const auto& [start, end] : marks) {
    ms.push_back((timeline->seconds(end) - timeline->seconds(start)) * 1e3);
  }
  return summarize(std::move(ms));
}

}  // namespace

KernelBenchReport bench_kernels(const PackedBatch& batch, const KernelBenchOptions& options,
                                AttentionBackend& backend, BackendKind kind,
                                const ProgressFn& progress) {
  const auto say = [&](const std::string& line) {
    if (progress) progress(line);
  };
  const BatchOptions& o = options.batch;
  RINGPACK_CHECK(options.warmup >= 0 && options.reps >= 1, "warm-up ", options.warmup, " and reps ",
                 options.reps, ": pass warm-up >= 0 and reps >= 1");
  validate_batch(batch);
  backend.check_supported(o.dtype, o.head_dim, options.backward);
  KernelBenchReport report;
  report.backend = backend.name();

  const int b = batch.batch, s = batch.seq_len;
  const AttentionDims dims{b, s, s, o.num_heads_q, o.num_heads_kv, o.head_dim};
  const size_t q_count = size_t(b) * s * o.num_heads_q * o.head_dim;
  const size_t kv_count = size_t(b) * s * o.num_heads_kv * o.head_dim;
  const size_t lse_count = size_t(b) * o.num_heads_q * s;
  const size_t element = dtype_size(o.dtype);

  say("drawing random inputs");
  RowTensors row = draw_row_inputs(batch, o);
  const DeviceBuffer q = upload(backend, row.q);
  const DeviceBuffer k = upload(backend, row.k);
  const DeviceBuffer v = upload(backend, row.v);
  const DeviceBuffer dout = upload(backend, row.dout);
  const size_t ids_bytes = batch.segment_ids.size() * sizeof(int32_t);
  const DeviceBuffer segment_ids = upload(backend, batch.segment_ids.data(), ids_bytes);
  const DeviceBuffer positions = upload(backend, batch.positions.data(), ids_bytes);
  DeviceBuffer out(backend, q_count * element), lse(backend, lse_count * sizeof(float));

  AttentionStep step;
  step.dims = dims;
  step.dtype = o.dtype;
  step.mask = o.mask;
  step.q = q.data();
  step.k = k.data();
  step.v = v.data();
  step.segment_ids_q = step.segment_ids_k = segment_ids.as<int32_t>();
  step.positions_q = step.positions_k = positions.as<int32_t>();
  const auto forward = [&] { backend.forward_direct(step, out.data(), lse.as<float>()); };

  say("timing the forward");
  report.forward = time_reps(backend, options.warmup, options.reps, forward);

  DeviceBuffer delta, dq, dk, dv;
  BackwardAccumulators grads;
  const auto zero_grads = [&] {
    backend.fill(grads.dq, q_count, 0.0f);
    backend.fill(grads.dk, kv_count, 0.0f);
    backend.fill(grads.dv, kv_count, 0.0f);
  };
  const auto backward = [&] {
    backend.compute_delta(dout.data(), out.data(), o.dtype, dims, delta.as<float>());
    backend.backward(step, {dout.data(), lse.as<float>(), delta.as<float>()}, grads);
  };
  if (options.backward) {
    delta = DeviceBuffer(backend, lse_count * sizeof(float));
    dq = DeviceBuffer(backend, q_count * sizeof(float));
    dk = DeviceBuffer(backend, kv_count * sizeof(float));
    dv = DeviceBuffer(backend, kv_count * sizeof(float));
    grads = {dq.as<float>(), dk.as<float>(), dv.as<float>()};
    zero_grads();
    say("timing the backward");
    report.backward = time_reps(backend, options.warmup, options.reps, backward);
  }

  // Verification: the reference's work grows with the visible pairs; the GPU one is fast.
  const VerifyReference reference = verify_reference_for(kind);
  const std::vector<int> one_rank(size_t(s), 0);
  double work = 0.0;
  for (const auto& pairs : count_step_pairs(batch, one_rank, 1, o.mask)) work += double(pairs[0]);
  work *= double(o.num_heads_q) * o.head_dim;
  const VerifyChoice choice =
      choose_verification(options.verify, work, reference == VerifyReference::kGpu);
  report.verified = choice.verify;
  report.verify_note = choice.note;
  if (!report.verified) return report;

  say("one fresh forward and backward for the check");
  forward();
  row.out = download_like(backend, out, row.q);
  row.lse = HostTensor(b * o.num_heads_q, s, sizeof(float));
  backend.copy_to_host(row.lse.data(), lse.data(), row.lse.size_bytes());
  if (options.backward) {
    zero_grads();
    backward();
    // The fp32 gradients in the dtype, as a run reports them.
    DeviceBuffer cast_q(backend, q_count * element), cast_kv(backend, kv_count * element);
    backend.cast_from_f32(cast_q.data(), o.dtype, grads.dq, q_count);
    row.dq = download_like(backend, cast_q, row.q);
    backend.cast_from_f32(cast_kv.data(), o.dtype, grads.dk, kv_count);
    row.dk = download_like(backend, cast_kv, row.k);
    backend.cast_from_f32(cast_kv.data(), o.dtype, grads.dv, kv_count);
    row.dv = download_like(backend, cast_kv, row.v);
  }
  report.errors = verify_run(batch, o, row, options.backward, progress, reference);
  report.verify_note = std::string("reference: ") + verify_reference_name(reference);
  report.passed = all_passed(report.errors);
  return report;
}

std::string backend_device_name(BackendKind kind, const BackendOptions& options) {
#ifdef RINGPACK_WITH_CUDA
  if (kind == BackendKind::kCuda) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, options.device) == cudaSuccess) return prop.name;
    return "cuda device " + std::to_string(options.device);
  }
#else
  (void)options;
#endif
  return backend_kind_name(kind);
}

}  // namespace ringpack
