// What every job resolves from its BatchOptions: the batch itself and the cost model's
// configuration.
#pragma once

#include "ringpack/job.h"

namespace ringpack {

// build_batch, and the row count and length written back into `options` (a layout file or a
// given layout decides them).
inline PackedBatch build_resolved_batch(BatchOptions& options) {
  PackedBatch batch = build_batch(options);
  options.batch = batch.batch;
  options.seq_len = batch.seq_len;
  return batch;
}

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
