// libFuzzer harness: the lengths file parser (read_lengths_file, src/core/doc_lengths.cpp), on
// the fuzz input as a lengths file. Seeds: fuzz/corpus/lengths. Lengths that parse are then
// packed into a small batch (pack_documents with --lengths file, capped and uncapped), as
// build_batch does for --lengths-file.
#include <cstddef>
#include <cstdint>

#include "core/doc_lengths.h"
#include "fuzz_support.h"
#include "ringpack/error.h"
#include "ringpack/layout.h"
#include "ringpack/packing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ringpack::fuzz::kMaxInputBytes) return -1;  // not added to the corpus
  const std::string path = ringpack::fuzz::write_scratch_file("lengths.txt", data, size);
  try {
    (void)ringpack::read_lengths_file(path);
    ringpack::PackerOptions packer;
    packer.source = ringpack::LengthSource::kFile;
    packer.lengths_file = path;
    for (const int cap : {0, 100}) {
      packer.max_doc_length = cap;
      ringpack::validate_batch(ringpack::pack_documents(2, 512, packer));
    }
  } catch (const ringpack::Error& e) {
    ringpack::fuzz::check_error_message(e.what());
  }
  return 0;
}
