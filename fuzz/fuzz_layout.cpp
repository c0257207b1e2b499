// libFuzzer harness: the layout JSON parser (load_layout_file, src/core/packing.cpp), on the
// fuzz input as a layout file. Seeds: fuzz/corpus/layout. A valid layout is then counted
// (count_documents), as run, plan and layout do next.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "ringpack/error.h"
#include "ringpack/layout.h"
#include "ringpack/packing.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ringpack::fuzz::kMaxInputBytes) return -1;  // not added to the corpus
  const std::string path = ringpack::fuzz::write_scratch_file("layout.json", data, size);
  try {
    const ringpack::PackedBatch batch = ringpack::load_layout_file(path);
    (void)ringpack::count_documents(batch);
  } catch (const ringpack::Error& e) {
    ringpack::fuzz::check_error_message(e.what());  // bad input: one line, exit 2 in the CLI
  }
  return 0;
}
