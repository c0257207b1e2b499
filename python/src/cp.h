// Context parallelism from Python: communicators (NCCL from a unique id, or a host communicator
// whose transfers a Python object makes, e.g. over torch.distributed), the CP schedules on a
// rank's shard, and the reorder plan that shards a batch.
#pragma once

#include <nanobind/nanobind.h>

namespace ringpack::python {

void bind_cp(nanobind::module_& m);

}  // namespace ringpack::python
