// STUB: delete when the CPU backends land.
#include "cpu/blocked_backend.h"
#include "cpu/reference_backend.h"
#include "ringpack/error.h"
namespace ringpack {
std::unique_ptr<AttentionBackend> make_reference_backend(const BackendOptions&) { RINGPACK_FAIL("not implemented"); }
std::unique_ptr<AttentionBackend> make_blocked_backend(const BackendOptions&) { RINGPACK_FAIL("not implemented"); }
}
