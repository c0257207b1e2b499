// The one place that maps a BackendKind to an implementation.

#include "core/excerpt.h"
#include "cpu/blocked_backend.h"
#include "cpu/reference_backend.h"
#include "ringpack/attention.h"
#include "ringpack/error.h"
#ifdef RINGPACK_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace ringpack {

const char* backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kReference:
      return "reference";
    case BackendKind::kCpu:
      return "cpu";
    case BackendKind::kCuda:
      return "cuda";
  }
  return "?";
}

BackendKind parse_backend_kind(std::string_view name) {
  for (const BackendKind kind : {BackendKind::kReference, BackendKind::kCpu, BackendKind::kCuda}) {
    if (name == backend_kind_name(kind)) return kind;
  }
  RINGPACK_FAIL("unknown backend '", excerpt(name), "': use reference, cpu or cuda");
}

std::unique_ptr<AttentionBackend> make_backend(BackendKind kind, const BackendOptions& options) {
  switch (kind) {
    case BackendKind::kReference:
      return make_reference_backend(options);
    case BackendKind::kCpu:
      return make_blocked_backend(options);
    case BackendKind::kCuda:
#ifdef RINGPACK_WITH_CUDA
      return make_cuda_backend(options);
#else
      RINGPACK_FAIL(
          "backend 'cuda' is not available: this ringpack was built without CUDA "
          "(configure with -DRINGPACK_CUDA=ON on a machine with nvcc)");
#endif
  }
  RINGPACK_FAIL("unknown backend kind");
}

}  // namespace ringpack
