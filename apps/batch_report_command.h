// The shape shared by `ringpack plan` and `ringpack layout`: a subcommand that takes the batch
// options (flags or YAML config, run-only keys ignored), runs one job on the resolved batch and
// writes its report as text or JSON (--json), to stdout or --output. Progress lines go to stderr
// (--quiet: none), as in `ringpack run`.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "batch_options.h"
#include "commands.h"
#include "json_report.h"
#include "output_file.h"

namespace ringpack::cli {

// job: (BatchOptions, BackendKind) -> Report; to_json: Report -> json; to_text: Report ->
// std::string. --backend picks the rates of the cost model (the backend `run` would use).
template <class Job, class ToJson, class ToText>
void add_batch_report_command(CLI::App& app, const char* name, const char* description, Job job,
                              ToJson to_json, ToText to_text) {
  struct State {
    BatchFlags batch;
    ConfigKeys keys;
    std::string backend = backend_kind_name(RunOptions{}.backend);
    bool quiet = false;
  };
  CLI::App* command = app.add_subcommand(name, description);
  auto state = std::make_shared<State>();
  state->batch.add_to(*command, state->keys);
  CLI::Option* backend =
      command
          ->add_option("--backend", state->backend,
                       "reference|cpu|cuda: the backend whose rates the cost model uses")
          ->group("Context parallelism");
  state->keys.add("backend", backend, store_into(state->backend, "backend"));
  command->add_flag("--quiet", state->quiet, "no progress lines on stderr")
      ->group("Input and output");
  for (const char* key : kRunOnlyConfigKeys) {
    if (std::string_view(key) != "backend") state->keys.add_ignored(key);
  }
  command->callback([state, job, to_json, to_text] {
    ProgressFn progress;
    if (!state->quiet) progress = print_progress;
    const auto report =
        job(state->batch.resolve(state->keys), parse_backend_kind(state->backend), progress);
    const OutputOptions& output = state->batch.output();
    if (progress) progress("writing the report");
    write_output(output.json ? json_text(to_json(report)) : to_text(report), output.output_file);
  });
}

}  // namespace ringpack::cli
