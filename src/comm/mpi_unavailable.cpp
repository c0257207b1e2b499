// Stands in for the MPI communicator (src/comm/mpi_communicator.cpp) in builds without MPI:
// make_mpi_communicator throws an Error that says how to get it.
#include "comm/mpi_communicator.h"
#include "ringpack/error.h"

namespace ringpack {

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds, size_t chunk_bytes) {
  RINGPACK_FAIL(
      "the mpi communicator is not available: ringpack was built without MPI: install "
      "libopenmpi-dev openmpi-bin and rebuild (scripts/setup.sh)");
}

}  // namespace ringpack
