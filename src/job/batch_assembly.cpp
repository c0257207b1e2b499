// assemble_batch (batch_assembly.h).
#include "job/batch_assembly.h"

#include <algorithm>

#include "ringpack/error.h"

namespace ringpack {

PackedBatch assemble_batch(const BatchOptions& options) {
  PackedBatch batch;
  if (!options.layout_file.empty()) {
    batch = load_layout_file(options.layout_file);
  } else if (options.layout.has_value()) {
    batch = *options.layout;
  } else {
    RINGPACK_CHECK(options.batch >= 1, "batch ", options.batch, " must be at least 1");
    RINGPACK_CHECK(options.seq_len >= 1, "seq_len ", options.seq_len, " must be at least 1");
    PackerOptions packer = options.packer;
    packer.seed = options.seed;
    if (packer.max_doc_length == kQuarterRowDocCap) {
      packer.max_doc_length = std::max(1, options.seq_len / 4);
    }
    batch = pack_documents(options.batch, options.seq_len, packer);
  }
  validate_batch(batch);
  return batch;
}

}  // namespace ringpack
