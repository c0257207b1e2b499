// Size limits checked before allocation (memory_budget.h).
#include "job/memory_budget.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "ringpack/error.h"

namespace ringpack {
namespace {

// Sizes are multiplied in long double so that absurd inputs (2e9 tokens x 1e8 head_dim) saturate
// instead of wrapping around.
using Bytes = long double;

constexpr Bytes kIndexBytesPerToken = 4 * sizeof(int32_t);  // ids, positions, index, inverse
// The run holds each tensor three times at its peak: the row, the shards, the ranks' results.
constexpr Bytes kRunCopies = 3;
// The fp64 reference: q, k, v, dO and out, dQ, dK, dV in double, and a low-precision baseline.
constexpr Bytes kReferenceCopies = 2;
// The plan keeps a few cp x cp int64 tables per candidate reorder (pairs, tile elements).
constexpr Bytes kPlanTables = 4;
constexpr Bytes kPlanCandidates = 6;

uint64_t saturate(Bytes bytes) {
  const Bytes limit = Bytes(UINT64_MAX / 2);
  return bytes >= limit ? uint64_t(limit) : uint64_t(bytes);
}

Bytes tokens(const BatchOptions& o) {
  return Bytes(std::max(o.batch, 0)) * Bytes(std::max(o.seq_len, 0));
}

Bytes plan_tables(const BatchOptions& o) {
  const Bytes cp = Bytes(std::max(o.cp, 1));
  return cp * cp * sizeof(int64_t) * kPlanTables * kPlanCandidates;
}

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", double(bytes) / double(1ull << 30));
  return text;
}

}  // namespace

uint64_t run_bytes_needed(const BatchOptions& o, bool backward, bool verify) {
  const Bytes heads = Bytes(std::max(o.num_heads_q, 0)) + Bytes(std::max(o.num_heads_kv, 0));
  const Bytes element = Bytes(dtype_size(o.dtype));
  // q, k, v, dO, out (+ dq, dk, dv): two tensors per head, twice with the backward.
  const Bytes per_token_tensors =
      heads * Bytes(std::max(o.head_dim, 0)) * element * (backward ? 4 : 2);
  const Bytes lse = Bytes(std::max(o.num_heads_q, 0)) * sizeof(float);
  Bytes bytes = tokens(o) * ((per_token_tensors + lse) * kRunCopies + kIndexBytesPerToken);
  if (verify) {
    bytes +=
        tokens(o) * heads * Bytes(std::max(o.head_dim, 0)) * sizeof(double) * 4 * kReferenceCopies;
  }
  return saturate(bytes + plan_tables(o));
}

uint64_t plan_bytes_needed(const BatchOptions& o) {
  return saturate(tokens(o) * kIndexBytesPerToken * 2 + plan_tables(o));
}

uint64_t usable_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  uint64_t usable = pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : UINT64_MAX;
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    usable = std::min<uint64_t>(usable, limit.rlim_cur);
  }
  return usable;
}

void check_memory(uint64_t bytes, const BatchOptions& o, const char* job) {
  const uint64_t usable = usable_memory_bytes();
  if (bytes <= usable) return;
  const bool cp_bound = Bytes(saturate(plan_tables(o))) * 2 > Bytes(bytes);
  RINGPACK_FAIL(job, " of --batch ", o.batch, " x --seq-len ", o.seq_len, " tokens, --cp ", o.cp,
                ", --heads-q ", o.num_heads_q, " / --heads-kv ", o.num_heads_kv, " of --head-dim ",
                o.head_dim, " needs about ", gib(bytes), " of memory, more than the ", gib(usable),
                " this machine allows: ",
                cp_bound ? "pass a smaller --cp (the plan keeps cp x cp tables)"
                         : "pass a smaller --seq-len or --batch, or fewer or smaller heads");
}

}  // namespace ringpack
