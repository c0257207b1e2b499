// The cost model's configuration for a run's batch options.
#pragma once

#include "ringpack/job.h"

namespace ringpack {

inline PlanConfig plan_config(const BatchOptions& o) {
  PlanConfig config;
  config.cp = o.cp;
  config.strategy = o.strategy;
  config.mask = o.mask;
  config.num_heads_q = o.num_heads_q;
  config.num_heads_kv = o.num_heads_kv;
  config.head_dim = o.head_dim;
  config.dtype_bytes = int(dtype_size(o.dtype));
  return config;
}

}  // namespace ringpack
