// Error locations and the per-thread rank named in them.
#include "ringpack/error.h"

namespace ringpack::detail {
namespace {
thread_local int g_current_rank = -1;
}

int current_rank() {
  return g_current_rank;
}
void set_current_rank(int rank) {
  g_current_rank = rank;
}

std::string error_location(const char* expr, const char* file, int line) {
  std::string where = concat(file, ":", line);
  if (expr != nullptr && expr[0] != '\0') where = concat("check `", expr, "` at ", where);
  if (g_current_rank >= 0) where = concat(where, " (rank ", g_current_rank, ")");
  return where;
}

}  // namespace ringpack::detail
