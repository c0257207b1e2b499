// STUB
#include "ringpack/layout.h"
#include "ringpack/error.h"
namespace ringpack {
void validate_batch(const PackedBatch&) { RINGPACK_FAIL("not implemented"); }
std::vector<int32_t> derive_positions(const std::vector<int32_t>&, int, int) { RINGPACK_FAIL("not implemented"); }
std::vector<int> count_documents(const PackedBatch&) { RINGPACK_FAIL("not implemented"); }
}
