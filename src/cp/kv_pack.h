// The KV pack: one buffer holding everything a rank sends of its shard's keys and values, so one
// ring step is one isend (docs/design.md §4: "together with that block's segment ids and
// positions").
//
//   [k: batch, n, num_heads_kv, head_dim] (dtype)      at k_offset
//   [v: batch, n, num_heads_kv, head_dim] (dtype)      at v_offset
//   [segment ids: batch, n] (int32)                    at segment_ids_offset
//   [positions: batch, n] (int32)                      at positions_offset
// Each section starts at a multiple of kKvPackAlignment, so device kernels can use wide loads.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ringpack/attention.h"
#include "ringpack/cp.h"

namespace ringpack {

constexpr size_t kKvPackAlignment = 256;  // bytes

struct KvPackLayout {
  size_t kv_bytes = 0;     // bytes of K (and of V)
  size_t token_bytes = 0;  // bytes of segment ids (and of positions)
  size_t k_offset = 0;
  size_t v_offset = 0;
  size_t segment_ids_offset = 0;
  size_t positions_offset = 0;
  size_t total_bytes = 0;
};

// Layout of the pack of one shard: dims.batch rows of dims.seqlen_k tokens.
KvPackLayout make_kv_pack_layout(const AttentionDims& dims, DType dtype);

// Pointers into a pack (in the backend's memory space).
struct KvView {
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* segment_ids = nullptr;
  const int32_t* positions = nullptr;
};

KvView kv_pack_view(const KvPackLayout& layout, const void* pack);

// Copies the shard's K, V, segment ids and positions into `pack` with backend.copy.
void fill_kv_pack(AttentionBackend& backend, const KvPackLayout& layout, const ShardInputs& in,
                  void* pack);

}  // namespace ringpack
