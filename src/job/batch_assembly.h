// The packed batch that BatchOptions describe: the layout file, the inline layout, or the packer
// (with its seed and the S/4 document cap resolved), validated. build_batch (ringpack/job.h)
// returns it; the fuzz harnesses, which stand in for build_batch, call it for small batches.
#pragma once

#include "ringpack/job.h"

namespace ringpack {

PackedBatch assemble_batch(const BatchOptions& options);

}  // namespace ringpack
