// Document-length sources for the packer (packing.h): the built-in corpus histogram, a lengths
// file, fixed and uniform lengths. Randomness is std::mt19937_64 plus the integer arithmetic
// below (no std::*_distribution), so a seed gives the same lengths with every standard library.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "ringpack/packing.h"

namespace ringpack {

// Uniform integer in [0, span) from `rng`, unbiased: draws below 2^64 mod span are rejected, so
// the accepted range is a whole multiple of span. span >= 1.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t span);

// Lengths (>= 1) from a text file of whitespace- or comma-separated positive integers; `#`
// starts a comment that runs to the end of the line. Throws naming the file, line and value.
std::vector<int64_t> read_lengths_file(const std::string& path);

// Draws document lengths from options.source, in order, capped at options.max_doc_length
// when that is > 0. A lengths file is read once and replayed from the start when exhausted.
class DocLengthSampler {
 public:
  explicit DocLengthSampler(const PackerOptions& options);

  int64_t next();

 private:
  int64_t draw();

  PackerOptions options_;
  std::mt19937_64 rng_;
  std::vector<int64_t> file_lengths_;  // kFile only
  size_t file_next_ = 0;
  int64_t bins_total_ = 0;  // kRealistic: sum of the bin counts
};

}  // namespace ringpack
