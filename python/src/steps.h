// One attention step on one device (no communication): the kernels the Python ops compose.
#pragma once

#include <nanobind/nanobind.h>

namespace ringpack::python {

void bind_steps(nanobind::module_& m);

}  // namespace ringpack::python
