// Names of the CP strategies (docs/design.md §4).
#include "core/excerpt.h"
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
  for (const Strategy strategy : {Strategy::kRing, Strategy::kAllGather}) {
    if (name == strategy_name(strategy)) return strategy;
  }
  RINGPACK_FAIL("unknown CP strategy '", excerpt(name), "': use ring or all_gather");
}

}  // namespace ringpack
