// What every job resolves from its BatchOptions: the batch itself (within the size limits of
// memory_budget.h) and the cost model's configuration.
#pragma once

#include <functional>

#include "job/memory_budget.h"
#include "ringpack/job.h"

namespace ringpack {

// The bytes a job needs for the given options (run_bytes_needed, plan_bytes_needed).
using BytesNeeded = std::function<uint64_t(const BatchOptions&)>;

// build_batch, and the row count and length written back into `options` (a layout file or a
// given layout decides them). The job's memory is checked before the packer allocates anything,
// and again once a layout has decided the sizes.
inline PackedBatch build_resolved_batch(BatchOptions& options, const BytesNeeded& bytes_needed,
                                        const char* job) {
  const bool packer = options.layout_file.empty() && !options.layout.has_value();
  if (packer) check_memory(bytes_needed(options), options, job);
  PackedBatch batch = build_batch(options);
  options.batch = batch.batch;
  options.seq_len = batch.seq_len;
  if (!packer) check_memory(bytes_needed(options), options, job);
  return batch;
}

// The cost model's view of the options, with the rates of the backend that will run.
inline PlanConfig plan_config(const BatchOptions& o, BackendKind backend) {
  PlanConfig config;
  config.cp = o.cp;
  config.strategy = o.strategy;
  config.mask = o.mask;
  config.num_heads_q = o.num_heads_q;
  config.num_heads_kv = o.num_heads_kv;
  config.head_dim = o.head_dim;
  config.dtype_bytes = int(dtype_size(o.dtype));
  config.rates = cost_rates(backend);
  return config;
}

}  // namespace ringpack
