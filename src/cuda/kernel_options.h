// The kernel choices of the CUDA launchers: the CUDA fields of BackendOptions
// (include/ringpack/attention.h), carried by the CUDA backend (or the benchmark) into run_forward
// and run_backward. Nothing else selects a kernel. Host-only header: no CUDA types.
//
// A kernel family runs Hopper's main loop (wgmma, TMA; the build's sm_90a code) on compute
// capability 9.x when a Hopper kernel serves the configuration (MainLoop::kAuto), else the
// portable mma.sync loop; kMmaSync forces the portable loop (A/B benchmarks, tests of both loops)
// and kWgmma requires Hopper's (an error naming what prevents it, rather than a silent fallback).
#pragma once

#include "ringpack/attention.h"

namespace ringpack::cuda {

struct KernelOptions {
  MainLoop forward_loop = MainLoop::kAuto;
  MainLoop backward_loop = MainLoop::kAuto;
  GradientAdd backward_grad_add = GradientAdd::kAuto;
  int backward_head_splits = 0;  // 0 = the launcher's choice (backward_head_splits)
  bool deterministic = false;    // bit-identical backward: mma.sync kernels, dQ without atomics
  KernelSchedule forward_schedule = KernelSchedule::kAuto;   // the Hopper forward's
  KernelSchedule backward_schedule = KernelSchedule::kAuto;  // the Hopper backward's
  MmaOverlap forward_overlap = MmaOverlap::kAuto;            // the Hopper forward's
  int sm_margin = 0;  // SMs the persistent kernels leave free
};

// What the Hopper kernels run for `options` at head_dim, auto resolved: the choices measured
// faster (docs/benchmarks.md: "Schedules and overlaps", H200; "Session 18" and "Session 19").
// The forward's persistent schedule won 5-6% on packed rows at head_dim 64 (the dense row 1%
// slower; 4% on an H100) and, since its softmax runs beside P V (softmax_before_wait), 4-5% at
// 128 (the dense row 2% slower by its fastest repetitions, H200 and H100), but lost 1-3% to
// grid + ping-pong at 256 (H100); ping-pong won 4% at 256 (3-6% on an H100, dense included) and
// was within 1% at 64 and 128; the persistent backward lost 3-9% at 64 and 128.
inline bool forward_persistent(const KernelOptions& options, int head_dim) {
  return options.forward_schedule == KernelSchedule::kAuto
             ? head_dim == 64 || head_dim == 128
             : options.forward_schedule == KernelSchedule::kPersistent;
}
inline bool forward_pingpong(const KernelOptions& options, int head_dim) {
  return options.forward_overlap == MmaOverlap::kAuto
             ? head_dim == 256
             : options.forward_overlap == MmaOverlap::kPingPong;
}
inline bool backward_persistent(const KernelOptions& options) {
  return options.backward_schedule == KernelSchedule::kPersistent;
}

// The kernel fields of `options`.
KernelOptions kernel_options(const BackendOptions& options);

// Throws ringpack::Error naming the value and the fix unless the kernels run the forward of
// (dtype, head_dim) with `options` on device `device` and, with `backward`, the backward too.
// Checks everything known before the tensors are; the launchers check the rest (a divisor of the
// GQA group for backward_head_splits, tensors that TMA can describe for kWgmma and kTma).
void check_supported(DType dtype, int head_dim, bool backward, const KernelOptions& options,
                     int device);

// Whether the current device runs Hopper's main loop (compute capability 9.x).
bool device_is_hopper();

// Whether a kernel family runs Hopper's main loop for `loop`: `hopper_kernel` says whether one
// serves the configuration (head_dim, mode). kWgmma without one throws; `flag` names the option in
// the message (e.g. "--forward-loop").
bool use_hopper_main_loop(MainLoop loop, bool hopper_kernel, const char* flag);

}  // namespace ringpack::cuda
