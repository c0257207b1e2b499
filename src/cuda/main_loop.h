// Which main loop a kernel family runs on the current device: Hopper's (wgmma, TMA; the build's
// sm_90a code) on compute capability 9.x, else the portable mma.sync loop. An environment
// variable set to 1 forces the portable loop (A/B benchmarks, tests of both loops); other such
// switches: RINGPACK_BACKWARD_ATOMICS (backward_wgmma_launch.h).
#pragma once

namespace ringpack::cuda {

// Whether environment variable `name` is set to 1 (the A/B switches of the benchmarks).
bool env_flag(const char* name);

// force_mma_sync_variable: e.g. "RINGPACK_FORWARD_MMA_SYNC".
bool use_hopper_main_loop(const char* force_mma_sync_variable);

}  // namespace ringpack::cuda
