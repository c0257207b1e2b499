// Load-balancing reorders (docs/design.md §3): permutations of a row applied before sharding.
//
// A reorder index `idx` of length seq_len maps reordered slot i to the original token idx[i];
// rank r holds slots [r*n, (r+1)*n), n = seq_len / cp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ringpack {

enum class ReorderKind { kContiguous, kDualChunkSwap, kStriped, kAuto };

struct ReorderSpec {
  ReorderKind kind = ReorderKind::kContiguous;
  int stripe_size = 1;  // striped only
};

const char* reorder_kind_name(
    ReorderKind kind);  // "contiguous", "dual_chunk_swap", "striped", "auto"
ReorderKind parse_reorder_kind(std::string_view name);
// "striped" with stripe size 1, "striped:64" with 64, otherwise the kind's name.
std::string reorder_label(const ReorderSpec& spec);
ReorderSpec parse_reorder_label(std::string_view label);

// Throws ringpack::Error naming the value and the fix when (seq_len, cp, spec) is not legal:
// seq_len % cp, dual_chunk_swap with seq_len % (2*cp), striped with seq_len % (cp*ss) or ss < 1.
// kAuto is rejected: resolve it first (plan.h).
void validate_reorder(int seq_len, int cp, const ReorderSpec& spec);

// The reorder index described above (validates first).
std::vector<int32_t> reorder_index(int seq_len, int cp, const ReorderSpec& spec);

// inverse[idx[i]] = i.
std::vector<int32_t> invert_index(const std::vector<int32_t>& index);

// dst[row][i] = src[row][index[i]] for `rows` rows of index.size() tokens of `token_bytes` bytes.
// Gathering with reorder_index reorders; gathering with invert_index undoes it.
void gather_tokens(const void* src, void* dst, const std::vector<int32_t>& index, int rows,
                   size_t token_bytes);

}  // namespace ringpack
