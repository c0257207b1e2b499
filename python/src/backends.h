// The attention backends the Python ops run on, one per (kind, device, stream, options), made on
// first use and kept for the life of the process (creating a CUDA backend is not free; a stream
// handle is only enqueued on, never owned).
#pragma once

#include <cstdint>

#include "ringpack/attention.h"

namespace ringpack::python {

struct BackendKey {
  bool cuda = false;
  int device = 0;
  std::uintptr_t stream = 0;  // CUDA: the caller's stream (0 = the legacy default stream)
  bool deterministic = false;
  int threads = 0;  // CPU: worker threads (0 = all cores)
};

AttentionBackend& backend_for(const BackendKey& key);

// Whether this build has the CUDA backend.
bool cuda_built();

}  // namespace ringpack::python
