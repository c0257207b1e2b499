// Names of the kernel choices of BackendOptions (include/ringpack/attention.h), as the CLI and
// the config file spell them.
#include "core/excerpt.h"
#include "ringpack/attention.h"
#include "ringpack/error.h"

namespace ringpack {

const char* main_loop_name(MainLoop loop) {
  switch (loop) {
    case MainLoop::kAuto:
      return "auto";
    case MainLoop::kWgmma:
      return "wgmma";
    case MainLoop::kMmaSync:
      return "mma_sync";
  }
  return "?";
}

MainLoop parse_main_loop(std::string_view name) {
  for (const MainLoop loop : {MainLoop::kAuto, MainLoop::kWgmma, MainLoop::kMmaSync}) {
    if (name == main_loop_name(loop)) return loop;
  }
  RINGPACK_FAIL("unknown main loop '", excerpt(name), "': use auto, wgmma or mma_sync");
}

const char* kernel_schedule_name(KernelSchedule schedule) {
  switch (schedule) {
    case KernelSchedule::kAuto:
      return "auto";
    case KernelSchedule::kGrid:
      return "grid";
    case KernelSchedule::kPersistent:
      return "persistent";
  }
  return "?";
}

KernelSchedule parse_kernel_schedule(std::string_view name) {
  for (const KernelSchedule schedule :
       {KernelSchedule::kAuto, KernelSchedule::kGrid, KernelSchedule::kPersistent}) {
    if (name == kernel_schedule_name(schedule)) return schedule;
  }
  RINGPACK_FAIL("unknown schedule '", excerpt(name), "': use auto, grid or persistent");
}

const char* mma_overlap_name(MmaOverlap overlap) {
  switch (overlap) {
    case MmaOverlap::kAuto:
      return "auto";
    case MmaOverlap::kWarpgroup:
      return "warpgroup";
    case MmaOverlap::kPingPong:
      return "pingpong";
  }
  return "?";
}

MmaOverlap parse_mma_overlap(std::string_view name) {
  for (const MmaOverlap overlap :
       {MmaOverlap::kAuto, MmaOverlap::kWarpgroup, MmaOverlap::kPingPong}) {
    if (name == mma_overlap_name(overlap)) return overlap;
  }
  RINGPACK_FAIL("unknown overlap '", excerpt(name), "': use auto, warpgroup or pingpong");
}

const char* gradient_add_name(GradientAdd add) {
  switch (add) {
    case GradientAdd::kAuto:
      return "auto";
    case GradientAdd::kTma:
      return "tma";
    case GradientAdd::kAtomics:
      return "atomics";
  }
  return "?";
}

GradientAdd parse_gradient_add(std::string_view name) {
  for (const GradientAdd add : {GradientAdd::kAuto, GradientAdd::kTma, GradientAdd::kAtomics}) {
    if (name == gradient_add_name(add)) return add;
  }
  RINGPACK_FAIL("unknown gradient add '", excerpt(name), "': use auto, tma or atomics");
}

}  // namespace ringpack
