// STUB
#include "ringpack/plan.h"
#include "ringpack/error.h"
namespace ringpack {
ReorderAnalysis analyse_reorder(const PackedBatch&, const ReorderSpec&, const PlanConfig&) { RINGPACK_FAIL("not implemented"); }
Plan make_plan(const PackedBatch&, const PlanConfig&) { RINGPACK_FAIL("not implemented"); }
ReorderSpec resolve_reorder(const PackedBatch&, const ReorderSpec&, const PlanConfig&, std::string*) { RINGPACK_FAIL("not implemented"); }
}
