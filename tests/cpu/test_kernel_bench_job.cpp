// bench_kernels (ringpack/job.h): the kernel benchmark behind the backend interface times a
// backend and checks its forward and backward against the fp64 reference; a backend that gets
// either wrong fails the check.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "ringpack/error.h"
#include "ringpack/job.h"
#include "support/adversarial_layouts.h"

namespace ringpack {
namespace {

KernelBenchOptions small_bench(DType dtype) {
  KernelBenchOptions options;
  options.batch.num_heads_q = 4;
  options.batch.num_heads_kv = 2;
  options.batch.head_dim = 16;
  options.batch.dtype = dtype;
  options.warmup = 1;
  options.reps = 3;
  return options;
}

std::unique_ptr<AttentionBackend> cpu_backend() {
  BackendOptions options;
  options.num_threads = 2;
  return make_backend(BackendKind::kCpu, options);
}

// A CPU backend whose forward_direct or backward is off by a little (host memory, fp32).
class SkewedBackend final : public AttentionBackend {
 public:
  SkewedBackend(bool skew_forward, bool skew_backward)
      : inner_(cpu_backend()), skew_forward_(skew_forward), skew_backward_(skew_backward) {}

  std::string name() const override { return "cpu"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  void check_supported(DType dtype, int head_dim, bool backward) const override {
    inner_->check_supported(dtype, head_dim, backward);
  }
  void forward(const AttentionStep& step, const ForwardAccumulators& acc) override {
    inner_->forward(step, acc);
  }
  void forward_direct(const AttentionStep& step, void* out, float* lse) override {
    inner_->forward_direct(step, out, lse);
    if (skew_forward_) static_cast<float*>(out)[7] += 0.5f;
  }
  void backward(const AttentionStep& step, const BackwardInputs& in,
                const BackwardAccumulators& acc) override {
    inner_->backward(step, in, acc);
    if (skew_backward_) acc.dk[5] += 0.5f;
  }
  void* allocate(size_t bytes) override { return inner_->allocate(bytes); }
  void deallocate(void* ptr) override { inner_->deallocate(ptr); }
  void copy_from_host(void* dst, const void* src, size_t bytes) override {
    inner_->copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    inner_->copy_to_host(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override { inner_->copy(dst, src, bytes); }
  void fill(float* data, size_t count, float value) override { inner_->fill(data, count, value); }
  void cast_from_f32(void* dst, DType dtype, const float* src, size_t count) override {
    inner_->cast_from_f32(dst, dtype, src, count);
  }
  void compute_delta(const void* dout, const void* out, DType dtype, const AttentionDims& dims,
                     float* delta) override {
    inner_->compute_delta(dout, out, dtype, dims, delta);
  }
  void accumulate(float* dst, const float* src, size_t count) override {
    inner_->accumulate(dst, src, count);
  }
  void synchronize() override { inner_->synchronize(); }
  std::unique_ptr<Timeline> make_timeline() override { return inner_->make_timeline(); }

 private:
  std::unique_ptr<AttentionBackend> inner_;
  bool skew_forward_, skew_backward_;
};

const TensorError& error_of(const KernelBenchReport& report, const std::string& name) {
  for (const TensorError& e : report.errors) {
    if (e.name == name) return e;
  }
  throw Error("no check of " + name);
}

TEST(KernelBenchJob, CpuBackendPassesEveryCheckOnEveryAdversarialLayout) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const testing::NamedLayout& layout : testing::adversarial_layouts(48, 3)) {
      SCOPED_TRACE(layout.name + " " + dtype_name(dtype));
      const auto backend = cpu_backend();
      const KernelBenchReport report =
          bench_kernels(layout.batch, small_bench(dtype), *backend, BackendKind::kCpu);
      EXPECT_EQ(report.backend, "cpu");
      ASSERT_TRUE(report.verified) << report.verify_note;
      ASSERT_EQ(report.errors.size(), 5u);
      for (const TensorError& e : report.errors) EXPECT_TRUE(e.passed) << e.name << " " << e.worst;
      EXPECT_TRUE(report.passed);
      EXPECT_GT(report.forward.median_ms, 0.0);
      EXPECT_LE(report.forward.min_ms, report.forward.median_ms);
      EXPECT_LE(report.forward.median_ms, report.forward.max_ms);
      EXPECT_GT(report.backward.median_ms, 0.0);
    }
  }
}

TEST(KernelBenchJob, AWrongForwardOrBackwardFailsItsCheck) {
  const PackedBatch batch = testing::random_packed_batch(2, 40, 7);
  {
    SkewedBackend backend(true, false);
    const KernelBenchReport report =
        bench_kernels(batch, small_bench(DType::kF32), backend, BackendKind::kCpu);
    ASSERT_TRUE(report.verified);
    EXPECT_FALSE(report.passed);
    EXPECT_FALSE(error_of(report, "out").passed);
    EXPECT_TRUE(error_of(report, "lse").passed);
  }
  {
    SkewedBackend backend(false, true);
    const KernelBenchReport report =
        bench_kernels(batch, small_bench(DType::kF32), backend, BackendKind::kCpu);
    ASSERT_TRUE(report.verified);
    EXPECT_FALSE(report.passed);
    EXPECT_TRUE(error_of(report, "out").passed);
    EXPECT_TRUE(error_of(report, "dq").passed);
    EXPECT_FALSE(error_of(report, "dk").passed);
  }
}

TEST(KernelBenchJob, VerifyOffReportsNotVerified) {
  KernelBenchOptions options = small_bench(DType::kBF16);
  options.verify = false;
  options.backward = false;
  const auto backend = cpu_backend();
  const KernelBenchReport report =
      bench_kernels(testing::random_packed_batch(1, 32, 3), options, *backend, BackendKind::kCpu);
  EXPECT_FALSE(report.verified);
  EXPECT_FALSE(report.passed);
  EXPECT_TRUE(report.errors.empty());
  EXPECT_NE(report.verify_note.find("--no-verify"), std::string::npos) << report.verify_note;
  EXPECT_GT(report.forward.median_ms, 0.0);
  EXPECT_EQ(report.backward.median_ms, 0.0);
}

TEST(KernelBenchJob, BadRepsAreAnErrorBeforeAnyWork) {
  KernelBenchOptions options = small_bench(DType::kF32);
  options.reps = 0;
  const auto backend = cpu_backend();
  EXPECT_THROW(
      bench_kernels(testing::random_packed_batch(1, 16, 1), options, *backend, BackendKind::kCpu),
      Error);
}

// The default forward_direct (through fp32 accumulators) equals forward + cast.
TEST(KernelBenchJob, DefaultForwardDirectEqualsAccumulatedForward) {
  const PackedBatch batch = testing::random_packed_batch(1, 24, 5);
  const auto backend = cpu_backend();
  const int heads = 2, dim = 8;
  const size_t count = size_t(batch.seq_len) * heads * dim;
  std::vector<float> q(count), k(count), v(count);
  for (size_t i = 0; i < count; ++i) {
    q[i] = float(i % 7) * 0.1f;
    k[i] = float(i % 5) * 0.2f;
    v[i] = float(i % 3);
  }
  AttentionStep step;
  step.dims = {1, batch.seq_len, batch.seq_len, heads, heads, dim};
  step.dtype = DType::kF32;
  step.q = q.data();
  step.k = k.data();
  step.v = v.data();
  step.segment_ids_q = step.segment_ids_k = batch.segment_ids.data();
  step.positions_q = step.positions_k = batch.positions.data();
  std::vector<float> out(count), lse(size_t(heads) * batch.seq_len);
  backend->forward_direct(step, out.data(), lse.data());
  std::vector<float> acc(count, 0.0f), acc_lse(lse.size(), -INFINITY);
  backend->forward(step, {acc.data(), acc_lse.data()});
  EXPECT_EQ(std::memcmp(out.data(), acc.data(), count * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(lse.data(), acc_lse.data(), lse.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace ringpack
