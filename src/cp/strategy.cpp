// Names of the CP strategies (docs/design.md §4).
#include "ringpack/cp.h"
#include "ringpack/error.h"

namespace ringpack {

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::kRing:
      return "ring";
    case Strategy::kAllGather:
      return "all_gather";
  }
  return "?";
}

Strategy parse_strategy(std::string_view name) {
  if (name == "ring") return Strategy::kRing;
  if (name == "all_gather") return Strategy::kAllGather;
  RINGPACK_FAIL("unknown CP strategy '", name, "': use ring or all_gather");
}

}  // namespace ringpack
