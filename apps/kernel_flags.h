// The CUDA kernel choices of BackendOptions (include/ringpack/attention.h) as flags, shared by
// `ringpack run` and `ringpack bench` (--forward-loop, --backward-loop, --backward-grad-add,
// --backward-head-splits, --forward-schedule, --backward-schedule, --forward-overlap and
// --sm-margin), with BackendOptions' defaults. The CPU backends ignore them.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "batch_options.h"
#include "ringpack/attention.h"

namespace ringpack::cli {

class KernelFlags {
 public:
  KernelFlags();

  // Registers the flags on `command` under `group`, and their config keys (forward_loop, ...;
  // listed in kRunOnlyConfigKeys) in `keys` unless it is null.
  void add_to(CLI::App& command, const std::string& group, ConfigKeys* keys);

  // Sets the kernel fields of `options`. Throws ringpack::Error naming the flag and the value.
  void apply(BackendOptions& options) const;

  // The flags with their values, e.g. "--forward-loop auto --backward-loop auto ...".
  std::string describe() const;

 private:
  std::string forward_loop_;
  std::string backward_loop_;
  std::string backward_grad_add_;
  int backward_head_splits_;
  std::string forward_schedule_;
  std::string backward_schedule_;
  std::string forward_overlap_;
  int sm_margin_;
};

}  // namespace ringpack::cli
