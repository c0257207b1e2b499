#include "jax_ffi.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>

namespace ringpack::python {

void bind_jax_ffi(nanobind::module_& m) {
  m.def("xla_ffi_targets", []() { return nanobind::dict(); });
}

}  // namespace ringpack::python
