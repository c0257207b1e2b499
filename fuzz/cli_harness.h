// The parse step of the `ringpack` command line for the harnesses fuzz_cli and fuzz_config:
// the run, plan and layout commands exactly as apps/ registers them (add_run_command,
// add_plan_command, add_layout_command; main.cpp's application settings), parsed with CLI11,
// resolved (the --config file applied, the flags converted to RunOptions / BatchOptions) and
// handed to the real jobs, which check them (shapes, backend, launcher, memory) up to the
// point where they build the batch. No attention runs and nothing is written.
//
// The seam is at link time, no change to apps/ or src/: cli_harness.cpp defines
// ringpack::build_batch (ringpack/job.h), the one place run_job, plan_job and layout_job get
// their batch from, so the library's src/job/batch_builder.cpp is not linked into the
// harnesses. The stand-in optionally builds the batch when it is small, then ends the command
// by throwing, so the commands never go on to their analysis, their attention or their report,
// --output or --trace file.
#pragma once

#include <string>
#include <vector>

namespace ringpack::fuzz {

enum class CliOutcome {
  kResolved,  // the options resolved and passed the job's checks; the job would build the batch
  kBadInput,  // a parse error or ringpack::Error: one line and exit 2 in the CLI
  kHelp,      // --help and the like
};

struct CliSettings {
  // Build the batch (build_batch: layout file, --segment-ids, the packer with its lengths file)
  // when it has at most kMaxSmallBatchTokens tokens. Only for argument lists whose file names
  // stay inside the scratch folder: build_batch reads the files the options name.
  bool build_small_batches = false;
};
inline constexpr long kMaxSmallBatchTokens = 1 << 16;

// args[0] is the program name. Exceptions other than ringpack::Error and CLI11's parse errors
// propagate: the CLI would print them as a bare what(), and libFuzzer reports them.
CliOutcome parse_cli(const std::vector<std::string>& args, const CliSettings& settings);

}  // namespace ringpack::fuzz
