// ringpack._native: the Python extension (docs/python.md). Framework-neutral: DLPack arrays in,
// no link to torch or jax; ringpack.torch and ringpack.jax build the ops on top of it.
#include <nanobind/nanobind.h>

#include "cp.h"
#include "jax_ffi.h"
#include "ringpack/error.h"
#include "steps.h"

NB_MODULE(_native, m) {
  m.doc() = "ringpack's native kernels and CP schedules on DLPack arrays";
  // Frameworks keep references to the module's functions (torch.library ops, jax FFI targets)
  // until after nanobind's shutdown check, which would report them as leaks at every exit.
  nanobind::set_leak_warnings(false);
  nanobind::exception<ringpack::Error>(m, "RingpackError", PyExc_ValueError);
  ringpack::python::bind_steps(m);
  ringpack::python::bind_cp(m);
  ringpack::python::bind_jax_ffi(m);
}
