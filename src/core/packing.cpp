// STUB
#include "ringpack/packing.h"
#include "ringpack/error.h"
namespace ringpack {
const char* length_source_name(LengthSource) { return "?"; }
LengthSource parse_length_source(std::string_view) { RINGPACK_FAIL("not implemented"); }
const std::vector<LengthBin>& realistic_length_bins() { RINGPACK_FAIL("not implemented"); }
PackedBatch pack_documents(int, int, const PackerOptions&) { RINGPACK_FAIL("not implemented"); }
PackedBatch load_layout_file(const std::string&) { RINGPACK_FAIL("not implemented"); }
}
