// XLA FFI handlers for ringpack.jax (docs/python.md): the forward and backward attention steps as
// custom calls on CPU and CUDA. Built when jaxlib's FFI headers were found (RINGPACK_WITH_XLA_FFI).
#pragma once

#include <nanobind/nanobind.h>

namespace ringpack::python {

// Adds `xla_ffi_targets()` to the module: {target name: {platform: PyCapsule}}; empty without
// the FFI headers.
void bind_jax_ffi(nanobind::module_& m);

}  // namespace ringpack::python
