// TensorError: how far one tensor is from the fp64 reference, and the tolerance it was held to.
// run_job's verification (ringpack/job.h) reports one per tensor; the rules that fill it are
// src/core/compare.h.
#pragma once

#include <cstdint>
#include <string>

namespace ringpack {

struct TensorError {
  std::string name;  // "out", "lse", "dq", "dk", "dv"
  double max_abs_err = 0.0;
  double rel_err = 0.0;           // ||x - ref|| / ||ref||
  double baseline_rel_err = 0.0;  // the reference's own error in the run's dtype
  double tolerance = 0.0;         // rel_err must be <= tolerance
  int64_t masked_mismatches = 0;  // rows where exactly one side has no visible key
  bool passed = false;
  std::string worst;  // where max_abs_err occurs: row, token, head, dim, expected, got
};

}  // namespace ringpack
