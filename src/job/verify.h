// Verification of a run against the single-device fp64 reference (docs/design.md §7).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "job/host_tensors.h"
#include "ringpack/attention.h"
#include "ringpack/job.h"

namespace ringpack {

// The whole-row tensors of a run, in original token order.
struct RowTensors {
  HostTensor q, k, v, dout;    // inputs, dtype: [batch, seq_len, heads, head_dim]
  HostTensor out, dq, dk, dv;  // results, dtype
  HostTensor lse;              // fp32 [batch, num_heads_q, seq_len]
};

// Visible pairs x heads x head_dim above which `verify` left unset means off: the fp64
// reference (and the dtype baseline) would take too long on a small machine.
constexpr double kAutoVerifyWorkLimit = 2.0e9;

// Whether a run or a bench verifies: `requested` (--verify / --no-verify) when given, else when
// `work` (visible pairs x heads x head_dim) is at most kAutoVerifyWorkLimit or `cheap` (the
// reference costs little whatever the size). `note` says why not, when not.
struct VerifyChoice {
  bool verify = false;
  std::string note;
};
VerifyChoice choose_verification(std::optional<bool> requested, double work, bool cheap);

// Every tensor passed (false when there is none).
bool all_passed(const std::vector<TensorError>& errors);

// Which fp64 reference judges a run (docs/numerics.md, "The GPU reference"): the GPU reference
// (src/cuda/reference/) for the CUDA backend of a build with CUDA, the CPU reference
// (src/cpu/reference_attention.h) otherwise. Both compute the same sums in fp64 and the same
// low-precision baseline; the CPU reference judges the GPU one in tests/gpu.
enum class VerifyReference { kCpu, kGpu };
VerifyReference verify_reference_for(BackendKind backend);
const char* verify_reference_name(VerifyReference reference);  // "cpu fp64", "gpu fp64"

// Compares every result tensor (out, lse and, with `backward`, dq, dk, dv) with the reference
// and, for bf16/fp16, the reference's own error in the dtype. kGpu needs a build with CUDA and a
// device (the current one).
std::vector<TensorError> verify_run(const PackedBatch& batch, const BatchOptions& options,
                                    const RowTensors& tensors, bool backward,
                                    const ProgressFn& progress,
                                    VerifyReference reference = VerifyReference::kCpu);

}  // namespace ringpack
