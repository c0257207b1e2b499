// STUB
#include "ringpack/reorder.h"
#include "ringpack/error.h"
namespace ringpack {
const char* reorder_kind_name(ReorderKind) { return "?"; }
ReorderKind parse_reorder_kind(std::string_view) { RINGPACK_FAIL("not implemented"); }
std::string reorder_label(const ReorderSpec&) { RINGPACK_FAIL("not implemented"); }
ReorderSpec parse_reorder_label(std::string_view) { RINGPACK_FAIL("not implemented"); }
void validate_reorder(int, int, const ReorderSpec&) { RINGPACK_FAIL("not implemented"); }
std::vector<int32_t> reorder_index(int, int, const ReorderSpec&) { RINGPACK_FAIL("not implemented"); }
std::vector<int32_t> invert_index(const std::vector<int32_t>&) { RINGPACK_FAIL("not implemented"); }
void gather_tokens(const void*, void*, const std::vector<int32_t>&, int, size_t) { RINGPACK_FAIL("not implemented"); }
}
