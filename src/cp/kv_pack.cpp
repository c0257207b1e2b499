// The KV pack layout and its filling (see kv_pack.h).
#include "cp/kv_pack.h"

#include <cstddef>

namespace ringpack {
namespace {

size_t align_up(size_t bytes) {
  return (bytes + kKvPackAlignment - 1) / kKvPackAlignment * kKvPackAlignment;
}

}  // namespace

KvPackLayout make_kv_pack_layout(const AttentionDims& dims, DType dtype) {
  KvPackLayout layout;
  const size_t tokens = size_t(dims.batch) * size_t(dims.seqlen_k);
  layout.kv_bytes = tokens * size_t(dims.num_heads_kv) * size_t(dims.head_dim) * dtype_size(dtype);
  layout.token_bytes = tokens * sizeof(int32_t);
  layout.k_offset = 0;
  layout.v_offset = align_up(layout.k_offset + layout.kv_bytes);
  layout.segment_ids_offset = align_up(layout.v_offset + layout.kv_bytes);
  layout.positions_offset = align_up(layout.segment_ids_offset + layout.token_bytes);
  layout.total_bytes = align_up(layout.positions_offset + layout.token_bytes);
  return layout;
}

KvView kv_pack_view(const KvPackLayout& layout, const void* pack) {
  const auto* base = static_cast<const std::byte*>(pack);
  KvView view;
  view.k = base + layout.k_offset;
  view.v = base + layout.v_offset;
  view.segment_ids = reinterpret_cast<const int32_t*>(base + layout.segment_ids_offset);
  view.positions = reinterpret_cast<const int32_t*>(base + layout.positions_offset);
  return view;
}

void fill_kv_pack(AttentionBackend& backend, const KvPackLayout& layout, const ShardInputs& in,
                  void* pack) {
  auto* base = static_cast<std::byte*>(pack);
  backend.copy(base + layout.k_offset, in.k, layout.kv_bytes);
  backend.copy(base + layout.v_offset, in.v, layout.kv_bytes);
  backend.copy(base + layout.segment_ids_offset, in.segment_ids, layout.token_bytes);
  backend.copy(base + layout.positions_offset, in.positions, layout.token_bytes);
}

}  // namespace ringpack
