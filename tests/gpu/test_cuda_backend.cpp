// The CUDA AttentionBackend (cuda_backend.cpp) through the public interface: memory and copies,
// fill and casts, the device reorder gathers, supported-configuration errors, cp = 1 forward
// (merge into fresh accumulators == the direct kernel) and a backward step against the fp64
// reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/compare.h"
#include "cpu/reference_attention.h"
#include "cuda/cuda_backend.h"
#include "cuda/elementwise.h"
#include "cuda/forward/api.h"
#include "cuda/kernel_options.h"
#include "gpu/gpu_test_support.h"
#include "ringpack/error.h"
#include "ringpack/reorder.h"

namespace ringpack::testing {
namespace {

class CudaBackendTest : public GpuTest {
 protected:
  void SetUp() override {
    GpuTest::SetUp();
    if (IsSkipped()) return;
    backend = make_cuda_backend(BackendOptions{});
  }
  std::unique_ptr<AttentionBackend> backend;
};

// A device buffer owned through the backend's allocate / deallocate.
struct BackendBuffer {
  BackendBuffer(AttentionBackend& b, size_t bytes) : backend(b), ptr(b.allocate(bytes)) {}
  ~BackendBuffer() { backend.deallocate(ptr); }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr);
  }
  AttentionBackend& backend;
  void* ptr;
};

template <class T>
std::unique_ptr<BackendBuffer> upload(AttentionBackend& backend, const std::vector<T>& host) {
  auto buffer = std::make_unique<BackendBuffer>(backend, host.size() * sizeof(T));
  backend.copy_from_host(buffer->ptr, host.data(), host.size() * sizeof(T));
  return buffer;
}

template <class T>
std::vector<T> download(AttentionBackend& backend, const BackendBuffer& buffer, size_t count) {
  std::vector<T> host(count);
  backend.copy_to_host(host.data(), buffer.ptr, count * sizeof(T));
  return host;
}

TEST_F(CudaBackendTest, ReportsItsNameAndMemorySpace) {
  EXPECT_EQ(backend->name(), "cuda");
  EXPECT_EQ(backend->memory_space(), MemorySpace::kDevice);
}

TEST_F(CudaBackendTest, CheckSupportedNamesTheValueAndTheFix) {
  for (const bool backward : {false, true}) {
    EXPECT_NO_THROW(backend->check_supported(DType::kBF16, 128, backward));
    EXPECT_NO_THROW(backend->check_supported(DType::kF16, 64, backward));
    try {
      backend->check_supported(DType::kF32, 128, backward);
      ADD_FAILURE() << "fp32 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("fp32"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("--dtype bf16"), std::string::npos) << e.what();
    }
    EXPECT_THROW(backend->check_supported(DType::kBF16, 80, backward), Error);
  }
}

// Both directions run head_dim 64, 128 and 256; another head dim is rejected by the support check
// (before any work) with one line naming it and the dims that run.
TEST_F(CudaBackendTest, CheckSupportedNamesTheHeadDimsOfBothDirections) {
  for (int head_dim : {64, 128, 256}) {
    for (bool backward : {false, true}) {
      EXPECT_NO_THROW(backend->check_supported(DType::kBF16, head_dim, backward))
          << "head_dim " << head_dim << (backward ? " with" : " without") << " backward";
    }
  }
  try {
    backend->check_supported(DType::kBF16, 192, /*backward=*/true);
    ADD_FAILURE() << "head_dim 192 accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("head_dim 192"), std::string::npos) << what;
    EXPECT_NE(what.find("64, 128 or 256"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// Kernel options that cannot hold are rejected by the support check, naming the flag.
TEST_F(CudaBackendTest, CheckSupportedRejectsKernelOptionsThatCannotHold) {
  const auto rejects = [](const BackendOptions& options, int head_dim, bool backward,
                          const std::string& named) {
    const auto cuda_backend = make_cuda_backend(options);
    try {
      cuda_backend->check_supported(DType::kBF16, head_dim, backward);
      ADD_FAILURE() << named << " accepted at head_dim " << head_dim;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(named), std::string::npos) << e.what();
    }
  };
  BackendOptions options;
  options.forward_loop = MainLoop::kWgmma;
  for (int head_dim : {64, 128, 256}) {  // the Hopper forward's head dims
    if (cuda::device_is_hopper()) {
      EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, head_dim, false))
          << "head_dim " << head_dim;
    } else {
      rejects(options, head_dim, false, "--forward-loop wgmma");
    }
  }
  options = BackendOptions{};
  options.backward_loop = MainLoop::kWgmma;
  for (int head_dim : {64, 128, 256}) {  // the Hopper backward's head dims
    EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, head_dim, true))
        << "head_dim " << head_dim;
  }
  options.deterministic = true;
  rejects(options, 128, true, "--backward-loop wgmma");
  options = BackendOptions{};
  options.backward_grad_add = GradientAdd::kTma;
  for (int head_dim : {64, 128, 256}) {
    EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, head_dim, true))
        << "head_dim " << head_dim;
  }
  options.backward_loop = MainLoop::kMmaSync;
  rejects(options, 128, true, "--backward-grad-add tma");
  options = BackendOptions{};
  options.backward_head_splits = 2;
  options.deterministic = true;
  rejects(options, 128, true, "--backward-head-splits 2");
  options = BackendOptions{};
  options.backward_head_splits = -1;
  rejects(options, 128, false, "--backward-head-splits -1");
  const int sms = device_sm_count();
  options = BackendOptions{};
  options.forward_schedule = KernelSchedule::kGrid;
  options.sm_margin = 8;  // the grid schedule takes every SM
  rejects(options, 128, false, "--forward-schedule persistent");
  options.forward_schedule = KernelSchedule::kPersistent;
  options.sm_margin = sms;  // no SM left to the kernels
  rejects(options, 128, false, "--sm-margin " + std::to_string(sms));
  options.sm_margin = -1;
  rejects(options, 128, false, "--sm-margin -1");
  options.sm_margin = sms - 1;
  EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, 128, false));
  options.forward_loop = MainLoop::kMmaSync;  // only the Hopper forward is persistent
  rejects(options, 128, false, "--forward-schedule persistent");
  options = BackendOptions{};
  options.forward_schedule = KernelSchedule::kPersistent;
  options.sm_margin = 8;  // the backward's grid schedule takes every SM
  rejects(options, 128, true, "--backward-schedule persistent");
  options.backward_schedule = KernelSchedule::kPersistent;
  EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, 128, true));
  options.deterministic = true;  // the deterministic backward runs the mma.sync kernels
  rejects(options, 128, true, "--backward-schedule persistent");
  options = BackendOptions{};
  options.forward_overlap = MmaOverlap::kPingPong;
  EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, 64, false));
  options.forward_loop = MainLoop::kMmaSync;  // only the Hopper forward takes turns
  rejects(options, 64, false, "--forward-overlap pingpong");
  // The auto schedule is persistent at head_dim 64 and 128 only, so only there can the forward
  // leave SMs free; an mma.sync forward cannot.
  options = BackendOptions{};
  options.sm_margin = 8;
  EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, 64, false));
  EXPECT_NO_THROW(make_cuda_backend(options)->check_supported(DType::kBF16, 128, false));
  rejects(options, 256, false, "--forward-schedule persistent");
  rejects(options, 64, true, "--backward-schedule persistent");
  options.forward_loop = MainLoop::kMmaSync;
  rejects(options, 64, false, "--sm-margin 8");
  // The backward's options do not concern a forward-only run.
  options = BackendOptions{};
  options.backward_loop = MainLoop::kWgmma;
  EXPECT_NO_THROW(
      make_cuda_backend(options)->check_supported(DType::kBF16, 64, /*backward=*/false));
}

TEST_F(CudaBackendTest, CopiesFillAndCastsRoundLikeTheHost) {
  const uint64_t seed = seed_from_test_name();
  const size_t count = 10007;
  const std::vector<float> values = random_uniform(count, seed, -300.0f, 300.0f);
  auto src = upload(*backend, values);
  BackendBuffer copy(*backend, count * sizeof(float));
  backend->copy(copy.ptr, src->ptr, count * sizeof(float));
  EXPECT_EQ(download<float>(*backend, copy, count), values);

  for (DType dtype : {DType::kBF16, DType::kF16}) {
    BackendBuffer dst(*backend, count * dtype_size(dtype));
    backend->cast_from_f32(dst.ptr, dtype, src->as<float>(), count);
    const auto bytes = download<std::byte>(*backend, dst, count * dtype_size(dtype));
    const HostTensor expected = make_host_tensor(values, dtype);
    EXPECT_EQ(bytes, expected.bytes) << dtype_name(dtype);
  }

  backend->fill(copy.as<float>(), count, -INFINITY);
  for (float x : download<float>(*backend, copy, count)) ASSERT_EQ(x, -INFINITY);
}

TEST_F(CudaBackendTest, DeviceGatherReordersAndRestoresRows) {
  const uint64_t seed = seed_from_test_name();
  const int rows = 3;
  const int tokens = 96;
  for (size_t token_bytes : {size_t(4), size_t(6), size_t(256)}) {
    std::vector<uint8_t> data(rows * tokens * token_bytes);
    const std::vector<float> noise = random_uniform(data.size(), seed, 0.0f, 255.0f);
    for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(noise[i]);
    const std::vector<int32_t> index =
        reorder_index(tokens, 4, ReorderSpec{ReorderKind::kDualChunkSwap, 1});
    std::vector<uint8_t> expected(data.size());
    gather_tokens(data.data(), expected.data(), index, rows, token_bytes);

    DeviceBuffer d_src = to_device(data);
    DeviceBuffer d_dst(data.size());
    d_dst.poison();
    DeviceBuffer d_index = to_device(index);
    DeviceBuffer d_inverse = to_device(invert_index(index));
    cuda::gather_tokens(d_src.data(), d_dst.data(), d_index.as<int32_t>(), rows, tokens,
                        token_bytes, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(to_host<uint8_t>(d_dst, data.size()), expected) << token_bytes << " bytes/token";
    d_src.poison();
    cuda::gather_tokens(d_dst.data(), d_src.data(), d_inverse.as<int32_t>(), rows, tokens,
                        token_bytes, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(to_host<uint8_t>(d_src, data.size()), data) << token_bytes << " bytes/token";
  }
}

// One step's inputs on the backend, and the same problem for the reference.
struct BackendProblem {
  AttentionDims dims;
  DType dtype = DType::kBF16;
  PackedBatch layout;
  HostTensor q, k, v, dout;
  std::vector<double> q64, k64, v64, dout64;
  std::unique_ptr<BackendBuffer> d_q, d_k, d_v, d_seg, d_pos;
  AttentionStep step;
  ReferenceProblem reference;
};

void prepare(AttentionBackend& backend, uint64_t seed, BackendProblem& p) {
  p.layout = random_packed_batch(2, 300, seed);
  p.dims = {2, 300, 300, 8, 2, 128};
  const size_t q_count = size_t(2) * 300 * 8 * 128;
  const size_t kv_count = size_t(2) * 300 * 2 * 128;
  p.q = random_tensor(q_count, p.dtype, seed + 1);
  p.k = random_tensor(kv_count, p.dtype, seed + 2);
  p.v = random_tensor(kv_count, p.dtype, seed + 3);
  p.dout = random_tensor(q_count, p.dtype, seed + 4);
  p.q64 = as_doubles(p.q, p.dtype);
  p.k64 = as_doubles(p.k, p.dtype);
  p.v64 = as_doubles(p.v, p.dtype);
  p.dout64 = as_doubles(p.dout, p.dtype);
  p.d_q = upload(backend, p.q.bytes);
  p.d_k = upload(backend, p.k.bytes);
  p.d_v = upload(backend, p.v.bytes);
  p.d_seg = upload(backend, p.layout.segment_ids);
  p.d_pos = upload(backend, p.layout.positions);
  p.step.dims = p.dims;
  p.step.dtype = p.dtype;
  p.step.q = p.d_q->ptr;
  p.step.k = p.d_k->ptr;
  p.step.v = p.d_v->ptr;
  p.step.segment_ids_q = p.step.segment_ids_k = p.d_seg->as<int32_t>();
  p.step.positions_q = p.step.positions_k = p.d_pos->as<int32_t>();
  p.reference.dims = p.dims;
  p.reference.scale = double(resolve_scale(0.0f, p.dims.head_dim));
  p.reference.q = p.q64.data();
  p.reference.k = p.k64.data();
  p.reference.v = p.v64.data();
  p.reference.segment_ids_q = p.reference.segment_ids_k = p.layout.segment_ids.data();
  p.reference.positions_q = p.reference.positions_k = p.layout.positions.data();
}

TEST_F(CudaBackendTest, Cp1ForwardEqualsTheDirectKernel) {
  BackendProblem p;
  prepare(*backend, seed_from_test_name(), p);
  const size_t o_count = size_t(p.dims.batch) * p.dims.seqlen_q * p.dims.num_heads_q * 128;
  const size_t l_count = size_t(p.dims.batch) * p.dims.num_heads_q * p.dims.seqlen_q;
  BackendBuffer acc_out(*backend, o_count * sizeof(float));
  BackendBuffer acc_lse(*backend, l_count * sizeof(float));
  backend->fill(acc_out.as<float>(), o_count, 0.0f);
  backend->fill(acc_lse.as<float>(), l_count, -INFINITY);
  backend->forward(p.step, {acc_out.as<float>(), acc_lse.as<float>()});
  const std::vector<float> out = download<float>(*backend, acc_out, o_count);
  const std::vector<float> lse = download<float>(*backend, acc_lse, l_count);

  DeviceBuffer direct_out = poisoned_buffer(o_count, p.dtype);
  DeviceBuffer direct_lse = poisoned_buffer(l_count, DType::kF32);
  cuda::run_forward_direct(p.step, direct_out.data(), direct_lse.as<float>(), cuda::KernelOptions{},
                           nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> expected_out = download_as_float(direct_out, p.dtype, o_count);
  const std::vector<float> expected_lse = to_host<float>(direct_lse, l_count);
  size_t differing = 0;
  for (size_t i = 0; i < o_count; ++i)
    differing += round_to(p.dtype, out[i]) != expected_out[i] ? 1 : 0;
  for (size_t i = 0; i < l_count; ++i)
    differing += lse[i] != expected_lse[i] ? 1 : 0;  // -inf == -inf holds
  EXPECT_EQ(differing, 0u);

  // The backend's forward_direct is the direct kernel, on the backend's stream.
  DeviceBuffer backend_out = poisoned_buffer(o_count, p.dtype);
  DeviceBuffer backend_lse = poisoned_buffer(l_count, DType::kF32);
  backend->forward_direct(p.step, backend_out.data(), backend_lse.as<float>());
  backend->synchronize();
  EXPECT_EQ(download_as_float(backend_out, p.dtype, o_count), expected_out);
  const std::vector<float> backend_lse_host = to_host<float>(backend_lse, l_count);
  EXPECT_EQ(std::memcmp(backend_lse_host.data(), expected_lse.data(), l_count * sizeof(float)), 0);

  // And both match the reference.
  const ReferenceForward ref = reference_forward(p.reference);
  const ReferenceForward low = lowprec_forward(p.reference, p.dtype);
  std::vector<double> rounded;
  for (float x : out) rounded.push_back(round_to(p.dtype, x));
  const TensorError e = compare_tensor("out", rounded, ref.out, &low.out, p.dtype, {2, 300, 8, 128},
                                       bshd_axis_names());
  EXPECT_TRUE(e.passed) << e.rel_err << " vs tolerance " << e.tolerance << "; " << e.worst;
}

TEST_F(CudaBackendTest, BackwardStepMatchesReference) {
  BackendProblem p;
  prepare(*backend, seed_from_test_name(), p);
  const ReferenceForward ref = reference_forward(p.reference);
  const ReferenceGrads grads = reference_backward(p.reference, p.dout64.data(), ref);
  const ReferenceGrads low = lowprec_backward(p.reference, p.dout64.data(), p.dtype);

  // O (dtype) and LSE from the device forward; delta and the gradients through the backend.
  const size_t o_count = p.q64.size();
  const size_t kv_count = p.k64.size();
  const size_t l_count = size_t(p.dims.batch) * p.dims.num_heads_q * p.dims.seqlen_q;
  DeviceBuffer out = poisoned_buffer(o_count, p.dtype);
  DeviceBuffer lse = poisoned_buffer(l_count, DType::kF32);
  cuda::run_forward_direct(p.step, out.data(), lse.as<float>(), cuda::KernelOptions{}, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto d_dout = upload(*backend, p.dout.bytes);
  BackendBuffer delta(*backend, l_count * sizeof(float));
  backend->compute_delta(d_dout->ptr, out.data(), p.dtype, p.dims, delta.as<float>());
  BackendBuffer dq(*backend, o_count * sizeof(float));
  BackendBuffer dk(*backend, kv_count * sizeof(float));
  BackendBuffer dv(*backend, kv_count * sizeof(float));
  backend->fill(dq.as<float>(), o_count, 0.0f);
  backend->fill(dk.as<float>(), kv_count, 0.0f);
  backend->fill(dv.as<float>(), kv_count, 0.0f);
  backend->backward(p.step, {d_dout->ptr, lse.as<float>(), delta.as<float>()},
                    {dq.as<float>(), dk.as<float>(), dv.as<float>()});
  const auto as_rounded = [&](const BackendBuffer& buffer, size_t count) {
    std::vector<double> values;
    for (float x : download<float>(*backend, buffer, count)) values.push_back(round_to(p.dtype, x));
    return values;
  };
  const std::vector<int64_t> q_shape = {2, 300, 8, 128};
  const std::vector<int64_t> kv_shape = {2, 300, 2, 128};
  for (const TensorError& e : {compare_tensor("dq", as_rounded(dq, o_count), grads.dq, &low.dq,
                                              p.dtype, q_shape, bshd_axis_names()),
                               compare_tensor("dk", as_rounded(dk, kv_count), grads.dk, &low.dk,
                                              p.dtype, kv_shape, bshd_axis_names()),
                               compare_tensor("dv", as_rounded(dv, kv_count), grads.dv, &low.dv,
                                              p.dtype, kv_shape, bshd_axis_names())}) {
    EXPECT_TRUE(e.passed) << e.name << " rel_err " << e.rel_err << " (tolerance " << e.tolerance
                          << "); worst " << e.worst;
  }
}

}  // namespace
}  // namespace ringpack::testing
