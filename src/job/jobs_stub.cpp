// STUB: replaced by the jobs.
#include "ringpack/job.h"
#include "ringpack/error.h"
namespace ringpack {
PackedBatch build_batch(const BatchOptions&) { RINGPACK_FAIL("not implemented"); }
RunReport run_job(const RunOptions&, const ProgressFn&) { RINGPACK_FAIL("not implemented"); }
PlanReport plan_job(const BatchOptions&) { RINGPACK_FAIL("not implemented"); }
LayoutReport layout_job(const BatchOptions&) { RINGPACK_FAIL("not implemented"); }
}
