// Building packed batches from document lengths (greedy first-fit), or loading a user layout.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ringpack/layout.h"

namespace ringpack {

enum class LengthSource {
  kRealistic,  // the built-in corpus histogram (data/doc_length_distribution.csv)
  kFile,       // lengths read from a text file, one or more per line
  kFixed,      // every document `fixed_length` tokens
  kUniform,    // uniform in [uniform_min, uniform_max]
};

const char* length_source_name(LengthSource source);  // "realistic", "file", "fixed", "uniform"
LengthSource parse_length_source(std::string_view name);

struct PackerOptions {
  bool packing = true;  // false: one document per row, the rest padding
  LengthSource source = LengthSource::kRealistic;
  std::string lengths_file;  // kFile
  int fixed_length = 1024;   // kFixed
  int uniform_min = 1;       // kUniform
  int uniform_max = 4096;
  int max_doc_length = 0;  // cap on sampled lengths; 0 = none
  uint64_t seed = 0;
};

// One histogram bin of the built-in distribution: lengths in [lo, hi], `count` documents.
struct LengthBin {
  int64_t lo;
  int64_t hi;
  int64_t count;
};
const std::vector<LengthBin>& realistic_length_bins();

// Packs documents into `batch` rows of `seq_len` tokens: documents are drawn from the source
// in order and placed first-fit; a document longer than a row is split into row-sized pieces,
// each a document of its own; space no document fills is tail padding. Segment ids count
// 1, 2, ... per row in token order; positions restart at 0 per document.
PackedBatch pack_documents(int batch, int seq_len, const PackerOptions& options);

// Reads {"segment_ids": [[...], ...], "positions": [[...], ...]} (positions optional) and
// validates it. Throws ringpack::Error naming the file and the problem.
PackedBatch load_layout_file(const std::string& path);

}  // namespace ringpack
