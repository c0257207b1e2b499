// build_batch: the one place a run, plan or layout gets its packed batch from. Its own file, so
// that the fuzz harnesses can stand in for it at link time (fuzz/cli_harness.h); the work is
// assemble_batch's (batch_assembly.h).
#include "job/batch_assembly.h"
#include "ringpack/job.h"

namespace ringpack {

PackedBatch build_batch(const BatchOptions& options) {
  return assemble_batch(options);
}

}  // namespace ringpack
