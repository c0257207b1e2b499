// Load-balancing reorders and their inverses (docs/design.md §3).
#include "ringpack/reorder.h"

#include <charconv>
#include <cstring>

#include "core/excerpt.h"
#include "ringpack/error.h"

namespace ringpack {

const char* reorder_kind_name(ReorderKind kind) {
  switch (kind) {
    case ReorderKind::kContiguous:
      return "contiguous";
    case ReorderKind::kDualChunkSwap:
      return "dual_chunk_swap";
    case ReorderKind::kStriped:
      return "striped";
    case ReorderKind::kAuto:
      return "auto";
  }
  return "?";
}

ReorderKind parse_reorder_kind(std::string_view name) {
  for (ReorderKind kind : {ReorderKind::kContiguous, ReorderKind::kDualChunkSwap,
                           ReorderKind::kStriped, ReorderKind::kAuto}) {
    if (name == reorder_kind_name(kind)) return kind;
  }
  RINGPACK_FAIL("unknown reorder '", excerpt(name),
                "': use auto, contiguous, dual_chunk_swap or striped (with --stripe-size)");
}

std::string reorder_label(const ReorderSpec& spec) {
  if (spec.kind == ReorderKind::kStriped && spec.stripe_size != 1) {
    return std::string("striped:") + std::to_string(spec.stripe_size);
  }
  return reorder_kind_name(spec.kind);
}

ReorderSpec parse_reorder_label(std::string_view label) {
  const size_t colon = label.find(':');
  ReorderSpec spec{parse_reorder_kind(label.substr(0, colon)), 1};
  if (colon == std::string_view::npos) return spec;
  RINGPACK_CHECK(spec.kind == ReorderKind::kStriped, "reorder '", excerpt(label),
                 "': only striped takes a stripe size (striped:K)");
  const std::string_view digits = label.substr(colon + 1);
  const auto [end, status] =
      std::from_chars(digits.data(), digits.data() + digits.size(), spec.stripe_size);
  RINGPACK_CHECK(status == std::errc() && end == digits.data() + digits.size(), "reorder '",
                 excerpt(label), "': the stripe size after ':' must be a whole number");
  return spec;
}

void validate_reorder(int seq_len, int cp, const ReorderSpec& spec) {
  RINGPACK_CHECK(cp >= 1, "cp must be at least 1 (got ", cp, ")");
  RINGPACK_CHECK(seq_len >= 1, "seq_len must be at least 1 (got ", seq_len, ")");
  RINGPACK_CHECK(spec.kind != ReorderKind::kAuto, "reorder auto must be resolved before use");
  RINGPACK_CHECK(seq_len % cp == 0, "seq_len ", seq_len, " is not divisible by cp ", cp,
                 "; use a seq_len that is a multiple of ", cp, " (e.g. ", (seq_len / cp + 1) * cp,
                 ")");
  if (spec.kind == ReorderKind::kDualChunkSwap) {
    RINGPACK_CHECK(seq_len % (2 * cp) == 0,
                   "dual_chunk_swap needs seq_len divisible by 2*cp = ", 2 * cp, " but seq_len is ",
                   seq_len, "; use --reorder striped or contiguous, or a seq_len multiple of ",
                   2 * cp);
  }
  if (spec.kind == ReorderKind::kStriped) {
    RINGPACK_CHECK(spec.stripe_size >= 1, "stripe size ", spec.stripe_size,
                   " is not positive; use --stripe-size 1 or more");
    RINGPACK_CHECK(
        seq_len % (cp * spec.stripe_size) == 0, "striped with stripe size ", spec.stripe_size,
        " needs seq_len divisible by cp*stripe_size = ", cp * spec.stripe_size, " but seq_len is ",
        seq_len, "; pick a stripe size that divides seq_len/cp = ", seq_len / cp);
  }
}

std::vector<int32_t> reorder_index(int seq_len, int cp, const ReorderSpec& spec) {
  validate_reorder(seq_len, cp, spec);
  const int n = seq_len / cp;  // tokens per rank
  std::vector<int32_t> index(seq_len);
  for (int r = 0; r < cp; ++r) {
    for (int j = 0; j < n; ++j) {
      int32_t original = 0;
      switch (spec.kind) {
        case ReorderKind::kContiguous:
          original = r * n + j;
          break;
        case ReorderKind::kDualChunkSwap: {
          // Chunks of L = S/(2cp): rank r holds chunk r, then chunk 2cp-1-r.
          const int chunk = n / 2;
          original = j < chunk ? r * chunk + j : (2 * cp - 1 - r) * chunk + (j - chunk);
          break;
        }
        case ReorderKind::kStriped: {
          // Local j = m*ss + k holds token m*cp*ss + r*ss + k.
          const int ss = spec.stripe_size;
          original = (j / ss) * cp * ss + r * ss + j % ss;
          break;
        }
        case ReorderKind::kAuto:
          break;
      }
      index[size_t(r) * n + j] = original;
    }
  }
  return index;
}

std::vector<int32_t> invert_index(const std::vector<int32_t>& index) {
  std::vector<int32_t> inverse(index.size(), -1);
  for (size_t i = 0; i < index.size(); ++i) {
    RINGPACK_CHECK(index[i] >= 0 && size_t(index[i]) < index.size() && inverse[index[i]] == -1,
                   "index is not a permutation: slot ", i, " holds ", index[i]);
    inverse[index[i]] = int32_t(i);
  }
  return inverse;
}

void gather_tokens(const void* src, void* dst, const std::vector<int32_t>& index, int rows,
                   size_t token_bytes) {
  const auto* in = static_cast<const std::byte*>(src);
  auto* out = static_cast<std::byte*>(dst);
  const size_t row_bytes = index.size() * token_bytes;
  for (int row = 0; row < rows; ++row) {
    for (size_t i = 0; i < index.size(); ++i) {
      std::memcpy(out + row * row_bytes + i * token_bytes,
                  in + row * row_bytes + size_t(index[i]) * token_bytes, token_bytes);
    }
  }
}

}  // namespace ringpack
