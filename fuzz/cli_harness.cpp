#include "cli_harness.h"

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "fuzz_support.h"
#include "job/batch_assembly.h"
#include "ringpack/error.h"
#include "ringpack/job.h"

namespace ringpack::fuzz {
namespace {

// Thrown by the build_batch stand-in below: the command's options resolved and checked.
struct OptionsResolved {};

CliSettings g_settings;

}  // namespace
}  // namespace ringpack::fuzz

// The one place every job gets its batch from (ringpack/job.h), replacing
// src/job/batch_builder.cpp in the harnesses (cli_harness.h): the job has checked its options
// and its memory by now; this ends it. A qualified definition: one that no longer matches
// job.h's declaration is a compile error here, not the real build_batch linked in.
ringpack::PackedBatch ringpack::build_batch(const BatchOptions& options) {
  // A layout (a file in the scratch folder, or --segment-ids) is bounded by the fuzz input; a
  // packed batch by its tokens. Built as the real build_batch builds it.
  const bool packer = options.layout_file.empty() && !options.layout.has_value();
  const bool small =
      !packer || (options.batch >= 1 && options.seq_len >= 1 &&
                  long(options.batch) * long(options.seq_len) <= fuzz::kMaxSmallBatchTokens);
  if (fuzz::g_settings.build_small_batches && small) (void)assemble_batch(options);
  throw fuzz::OptionsResolved{};
}

namespace ringpack::fuzz {

CliOutcome parse_cli(const std::vector<std::string>& args, const CliSettings& settings) {
  g_settings = settings;
  // As apps/main.cpp sets up the application (bench is left out: it runs GPU work).
  CLI::App app{"ringpack: context-parallel attention over packed sequences", "ringpack"};
  app.option_defaults()->always_capture_default();
  app.require_subcommand(0, 1);
  app.fallthrough();
  bool verbose = false;
  app.add_flag("--verbose", verbose, "on errors, also print where they were raised");
  cli::add_run_command(app);
  cli::add_plan_command(app);
  cli::add_layout_command(app);

  std::vector<char*> argv;
  argv.reserve(args.size());
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  try {
    app.parse(int(argv.size()), argv.data());
  } catch (const OptionsResolved&) {
    return CliOutcome::kResolved;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == cli::kExitSuccess) {
      for (const CLI::App* command : app.get_subcommands()) (void)command->help();
      (void)app.help();
      return CliOutcome::kHelp;
    }
    check_error_message(e.what());
    return CliOutcome::kBadInput;
  } catch (const Error& e) {
    check_error_message(e.what());
    return CliOutcome::kBadInput;
  }
  return CliOutcome::kResolved;  // no subcommand: main prints the help
}

}  // namespace ringpack::fuzz
