// libFuzzer harness: the YAML config parser (ConfigKeys::apply_file, apps/batch_options.cpp)
// with the keys of `run` (a superset of plan's and layout's), through the command line's parse
// step (cli_harness.h): `ringpack run --config FILE` on the fuzz input as FILE. Batches are not
// built: a config may name any file. Seeds: fuzz/corpus/config; dictionary: fuzz/config.dict.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cli_harness.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ringpack::fuzz::kMaxInputBytes) return -1;  // not added to the corpus
  const std::string path = ringpack::fuzz::write_scratch_file("config.yaml", data, size);
  (void)ringpack::fuzz::parse_cli({"ringpack", "run", "--config", path}, {});
  return 0;
}
