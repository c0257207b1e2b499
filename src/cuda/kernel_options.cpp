// The kernel choices of the CUDA launchers (kernel_options.h).
#include "cuda/kernel_options.h"

#include <cuda_runtime.h>

#include "cuda/backward/api.h"
#include "cuda/backward/launch_sm90.h"
#include "cuda/common/cuda_check.h"
#include "cuda/common/persistent.h"
#include "cuda/forward/api.h"
#include "cuda/forward/traits.h"
#include "ringpack/error.h"

namespace ringpack::cuda {
namespace {

constexpr int kHopperMajor = 9;

int compute_capability_major(int device) {
  int major = 0;
  RINGPACK_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major;
}

// The static half of use_hopper_main_loop: kWgmma needs a Hopper kernel and a Hopper device.
void check_hopper_loop(MainLoop loop, bool hopper_kernel, const char* flag, const char* what,
                       int device) {
  if (loop != MainLoop::kWgmma) return;
  RINGPACK_CHECK(hopper_kernel, flag, " wgmma: ", what, "; use ", flag, " auto");
  const int major = compute_capability_major(device);
  RINGPACK_CHECK(major == kHopperMajor, flag,
                 " wgmma needs a Hopper GPU (compute capability 9.x); ", "device ", device,
                 " has compute capability ", major, ".x; use ", flag, " auto");
}

}  // namespace

KernelOptions kernel_options(const BackendOptions& options) {
  KernelOptions kernel;
  kernel.forward_loop = options.forward_loop;
  kernel.backward_loop = options.backward_loop;
  kernel.backward_grad_add = options.backward_grad_add;
  kernel.backward_head_splits = options.backward_head_splits;
  kernel.deterministic = options.deterministic;
  kernel.forward_schedule = options.forward_schedule;
  kernel.backward_schedule = options.backward_schedule;
  kernel.forward_overlap = options.forward_overlap;
  kernel.sm_margin = options.sm_margin;
  return kernel;
}

void check_supported(DType dtype, int head_dim, bool backward, const KernelOptions& options,
                     int device) {
  check_forward_supported(dtype, head_dim);
  check_hopper_loop(options.forward_loop, forward_has_wgmma(head_dim), "--forward-loop",
                    "the Hopper forward serves head_dim 64, 128 and 256 only", device);
  RINGPACK_CHECK(options.backward_head_splits >= 0, "--backward-head-splits ",
                 options.backward_head_splits,
                 " is negative; give a divisor of --heads-q / --heads-kv, or 0 for the default");
  const bool hopper_forward = options.forward_loop != MainLoop::kMmaSync &&
                              forward_has_wgmma(head_dim) &&
                              compute_capability_major(device) == kHopperMajor;
  RINGPACK_CHECK(options.forward_schedule != KernelSchedule::kPersistent || hopper_forward,
                 "--forward-schedule persistent needs the Hopper forward (compute capability "
                 "9.x, --forward-loop auto or wgmma); use --forward-schedule auto");
  RINGPACK_CHECK(options.forward_overlap != MmaOverlap::kPingPong || hopper_forward,
                 "--forward-overlap pingpong needs the Hopper forward (compute capability 9.x, "
                 "--forward-loop auto or wgmma); use --forward-overlap auto");
  sms_for_kernels(options.sm_margin, device);
  RINGPACK_CHECK(
      options.sm_margin == 0 || (hopper_forward && forward_persistent(options, head_dim)),
      "--sm-margin ", options.sm_margin,
      " needs the persistent forward (--forward-schedule persistent, which auto "
      "chooses at head_dim 64 and 128): the grid schedule's CTAs take every SM");
  if (!backward) return;

  check_backward_supported(dtype, head_dim);
  const bool hopper_kernel = backward_has_wgmma(head_dim, options.deterministic);
  const char* const why_not = options.deterministic
                                  ? "the deterministic backward runs the mma.sync kernels"
                                  : "the Hopper backward serves head_dim 64, 128 and 256 only";
  check_hopper_loop(options.backward_loop, hopper_kernel, "--backward-loop", why_not, device);
  const bool hopper_backward = options.backward_loop != MainLoop::kMmaSync && hopper_kernel &&
                               compute_capability_major(device) == kHopperMajor;
  RINGPACK_CHECK(backward_persistent(options) || options.sm_margin == 0, "--sm-margin ",
                 options.sm_margin,
                 " needs --backward-schedule persistent: the grid schedule's CTAs take every SM");
  RINGPACK_CHECK(options.backward_schedule != KernelSchedule::kPersistent || hopper_backward,
                 "--backward-schedule persistent needs the Hopper backward (compute capability "
                 "9.x, not deterministic, --backward-loop auto or wgmma); use "
                 "--backward-schedule auto");
  if (options.backward_grad_add == GradientAdd::kTma) {
    // Only the Hopper backward adds by TMA reductions; the mma.sync backward adds by atomics.
    RINGPACK_CHECK(hopper_backward,
                   "--backward-grad-add tma needs the Hopper backward (head_dim 64, 128 or 256, "
                   "not deterministic, compute capability 9.x, --backward-loop auto or wgmma); "
                   "use --backward-grad-add auto");
  }
  RINGPACK_CHECK(!options.deterministic || options.backward_head_splits <= 1,
                 "--backward-head-splits ", options.backward_head_splits,
                 " with --deterministic: the deterministic backward adds dK/dV from one CTA per kv "
                 "head; use 0 or 1");
}

bool device_is_hopper() {
  int device = 0;
  RINGPACK_CUDA_CHECK(cudaGetDevice(&device));
  return compute_capability_major(device) == kHopperMajor;
}

bool use_hopper_main_loop(MainLoop loop, bool hopper_kernel, const char* flag) {
  switch (loop) {
    case MainLoop::kMmaSync:
      return false;
    case MainLoop::kAuto:
      return hopper_kernel && device_is_hopper();
    case MainLoop::kWgmma:
      RINGPACK_CHECK(hopper_kernel, flag,
                     " wgmma: no Hopper kernel serves this configuration (head_dim, mode); use ",
                     flag, " auto");
      RINGPACK_CHECK(device_is_hopper(), flag,
                     " wgmma needs a Hopper GPU (compute capability 9.x); use ", flag, " auto");
      return true;
  }
  RINGPACK_FAIL("unknown main loop ", int(loop));
}

}  // namespace ringpack::cuda
