// libFuzzer harness: the command line's parse step for run, plan and layout (cli_harness.h).
// The input is the argument list, one argument per line (without the program name); the first
// is usually the command. Seeds: fuzz/corpus/cli; dictionary: fuzz/cli.dict.
//
// File names stay inside the harness's scratch folder: the process works there (chdir at
// start), arguments holding '/' are skipped, and the folder holds a layout (layout.json), a
// lengths file (lengths.txt) and a config (run.yaml) that arguments may name. Small batches are
// built (cli_harness.h), so --layout, --segment-ids, --lengths-file and the packer options are
// exercised past the parse.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cli_harness.h"
#include "fuzz_support.h"

namespace {

constexpr size_t kMaxArgs = 128;

constexpr std::string_view kLayout =
    R"({"segment_ids": [[1, 1, 1, 2, 2, 0, 3, 3], [1, 1, 1, 1, 2, 2, 2, 2]],)"
    R"( "positions": [[0, 1, 2, 0, 1, 0, 0, 1], [0, 1, 2, 3, 0, 1, 2, 3]]})";
constexpr std::string_view kLengths = "# document lengths\n3, 5 8\n13\n";
constexpr std::string_view kConfig =
    "context_parallel_strategy: ring\ncontext_parallel_load_balance: true\n"
    "context_parallel_reorder_strategy: dual_chunk_swap\npacking: true\ncp: 2\nseq_len: 64\n"
    "batch: 2\nnum_heads_q: 2\nnum_heads_kv: 1\nhead_dim: 8\ndtype: fp32\nseed: 7\n"
    "lengths: file\nlengths_file: lengths.txt\n";

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using ringpack::fuzz::write_scratch_file;
  write_scratch_file("layout.json", kLayout);
  write_scratch_file("lengths.txt", kLengths);
  write_scratch_file("run.yaml", kConfig);
  if (chdir(ringpack::fuzz::scratch_dir().c_str()) != 0) {
    std::perror("fuzz_cli: chdir");
    std::abort();
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ringpack::fuzz::kMaxInputBytes) return -1;  // not added to the corpus
  std::vector<std::string> args{"ringpack"};
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (size_t begin = 0; begin < input.size();) {
    size_t end = input.find('\n', begin);
    if (end == std::string_view::npos) end = input.size();
    args.emplace_back(input.substr(begin, end - begin));
    begin = end + 1;
  }
  if (args.size() > kMaxArgs + 1) return -1;
  for (const std::string& arg : args) {
    // '/' could name files outside the scratch folder; NUL cannot be in an argv string.
    if (arg.find_first_of(std::string_view("/\0", 2)) != std::string::npos) return -1;
  }
  ringpack::fuzz::CliSettings settings;
  settings.build_small_batches = true;
  (void)ringpack::fuzz::parse_cli(args, settings);
  return 0;
}
