// What the library was built from (docs/design.md §8: benchmark tables name it).
#pragma once

namespace ringpack {

// The commit of the source tree at build time: `git describe --always --dirty` ("-dirty" when
// the tree had uncommitted changes), "<hash> (archive)" for a tree unpacked from `git archive`,
// or "unknown" (cmake/source_commit.cmake).
const char* source_commit();

}  // namespace ringpack
