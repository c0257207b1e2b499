#include "ringpack/version.h"

#include "ringpack/source_commit.h"  // generated at build time by cmake/source_commit.cmake

namespace ringpack {

const char* source_commit() {
  return RINGPACK_SOURCE_COMMIT;
}

}  // namespace ringpack
