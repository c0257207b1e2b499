// The CUDA kernel flags of `run` and `bench` (kernel_flags.h).
#include "kernel_flags.h"

#include "ringpack/error.h"

namespace ringpack::cli {
namespace {

// parse(value), with the flag named in the error.
template <class Parse>
auto parse_flag(const char* flag, const std::string& value, Parse parse) {
  try {
    return parse(value);
  } catch (const Error& e) {
    throw Error(std::string(flag) + ": " + e.what(), e.where());
  }
}

}  // namespace

KernelFlags::KernelFlags() {
  const BackendOptions defaults;
  forward_loop_ = main_loop_name(defaults.forward_loop);
  backward_loop_ = main_loop_name(defaults.backward_loop);
  backward_grad_add_ = gradient_add_name(defaults.backward_grad_add);
  backward_head_splits_ = defaults.backward_head_splits;
  forward_schedule_ = kernel_schedule_name(defaults.forward_schedule);
  backward_schedule_ = kernel_schedule_name(defaults.backward_schedule);
  forward_overlap_ = mma_overlap_name(defaults.forward_overlap);
  sm_margin_ = defaults.sm_margin;
}

void KernelFlags::add_to(CLI::App& command, const std::string& group, ConfigKeys* keys) {
  const auto add = [&](const char* flag, const char* key, auto& field, const std::string& help) {
    CLI::Option* option = command.add_option(flag, field, help)->group(group);
    if (keys != nullptr) keys->add(key, option, store_into(field, key));
  };
  add("--forward-loop", "forward_loop", forward_loop_,
      "CUDA forward main loop: auto (Hopper's wgmma loop where it serves: compute capability "
      "9.x, head_dim 64, 128 or 256; else mma_sync), wgmma (or an error), mma_sync");
  add("--backward-loop", "backward_loop", backward_loop_,
      "CUDA backward main loop: auto (Hopper's wgmma loop where it serves: compute capability "
      "9.x, head_dim 64, 128 or 256, not deterministic; else mma_sync), wgmma (or an error), "
      "mma_sync");
  add("--backward-grad-add", "backward_grad_add", backward_grad_add_,
      "how the Hopper backward adds dQ, dK, dV: auto (TMA reductions where TMA can describe the "
      "gradients, else atomics), tma (or an error), atomics");
  add("--backward-head-splits", "backward_head_splits", backward_head_splits_,
      "CUDA backward CTAs per (key tile, kv head): a divisor of --heads-q / --heads-kv; 0 = one "
      "per query head");
  add("--forward-schedule", "forward_schedule", forward_schedule_,
      "CUDA Hopper forward: auto (persistent at head_dim 64 and 128, grid at 256: the faster on "
      "an H200), grid (one CTA per query head and query tile) or persistent (one CTA per SM, "
      "--sm-margin fewer, walking the query tiles in descending row order: each document's "
      "heaviest first)");
  add("--backward-schedule", "backward_schedule", backward_schedule_,
      "CUDA Hopper backward: auto (grid: the faster on an H200), grid (one CTA per key tile and "
      "kv head) or persistent (one CTA per SM, --sm-margin fewer, walking the key tiles in row "
      "order)");
  add("--forward-overlap", "forward_overlap", forward_overlap_,
      "CUDA Hopper forward: auto (pingpong at head_dim 256, else warpgroup: the faster on an "
      "H200), warpgroup (each consumer warpgroup overlaps its softmax with its own MMAs) or "
      "pingpong (the two also take turns to issue their MMAs)");
  add("--sm-margin", "sm_margin", sm_margin_,
      "CUDA: SMs the persistent kernels leave free for NCCL transfers beside them (needs the "
      "persistent forward, and --backward-schedule persistent with the backward); 0 = all SMs");
}

void KernelFlags::apply(BackendOptions& options) const {
  options.forward_loop = parse_flag("--forward-loop", forward_loop_, parse_main_loop);
  options.backward_loop = parse_flag("--backward-loop", backward_loop_, parse_main_loop);
  options.backward_grad_add =
      parse_flag("--backward-grad-add", backward_grad_add_, parse_gradient_add);
  RINGPACK_CHECK(backward_head_splits_ >= 0, "--backward-head-splits ", backward_head_splits_,
                 " is negative: give a divisor of --heads-q / --heads-kv, or 0 for one CTA per "
                 "query head");
  options.backward_head_splits = backward_head_splits_;
  options.forward_schedule =
      parse_flag("--forward-schedule", forward_schedule_, parse_kernel_schedule);
  options.backward_schedule =
      parse_flag("--backward-schedule", backward_schedule_, parse_kernel_schedule);
  options.forward_overlap = parse_flag("--forward-overlap", forward_overlap_, parse_mma_overlap);
  RINGPACK_CHECK(sm_margin_ >= 0, "--sm-margin ", sm_margin_,
                 " is negative: give the number of SMs to leave free, or 0");
  options.sm_margin = sm_margin_;
}

std::string KernelFlags::describe() const {
  return "--forward-loop " + forward_loop_ + " --backward-loop " + backward_loop_ +
         " --backward-grad-add " + backward_grad_add_ + " --backward-head-splits " +
         std::to_string(backward_head_splits_) + " --forward-schedule " + forward_schedule_ +
         " --backward-schedule " + backward_schedule_ + " --forward-overlap " + forward_overlap_ +
         " --sm-margin " + std::to_string(sm_margin_);
}

}  // namespace ringpack::cli
