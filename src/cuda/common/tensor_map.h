// Tensor maps (TMA descriptors) for the BSHD tensors the kernels tile, encoded on the host through
// the driver's entry point (cudaGetDriverEntryPointByVersion), so the library does not link
// libcuda and still loads on machines without a driver.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace ringpack::cuda {

// Describes a [tokens, num_heads, head_dim] tensor of 16-bit elements (bf16 when bf16, else fp16)
// at `base` as a rank-3 map whose box is box_rows tokens x 1 head x 64 columns with the 128-byte
// swizzle of common/wgmma.h (one box fills one 64-column block of a shared tile; tokens past the
// end read as zeros). Returns false when the tensor cannot be described (base not 16-byte aligned);
// throws ringpack::Error when the driver refuses the map.
bool encode_token_tile_map(CUtensorMap* map, const void* base, bool bf16, int64_t tokens,
                           int num_heads, int head_dim, int box_rows);

// Describes an fp32 accumulator [batch][seqlen][num_heads][head_dim] (rows row_stride floats
// apart; dq, dk or dv) as a rank-4 map (column, head, row, batch) whose box is box_rows rows x
// 1 head x box_cols columns (at most 32: 128 bytes) with the 128-byte swizzle: the target of the
// backward's tensor reductions; rows past seqlen are dropped. Returns false when the accumulator
// cannot be described (base not 16-byte aligned, row stride not a multiple of 16 bytes); throws
// when the driver refuses.
bool encode_fp32_tile_map(CUtensorMap* map, float* base, int batch, int seqlen, int num_heads,
                          int head_dim, int64_t row_stride, int box_rows, int box_cols);

}  // namespace ringpack::cuda
