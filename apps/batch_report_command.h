// The shape shared by `ringpack plan` and `ringpack layout`: a subcommand that takes the batch
// options (flags or YAML config, run-only keys ignored), runs one job on the resolved batch and
// writes its report as text or JSON (--json), to stdout or --output.
#pragma once

#include <memory>

#include "batch_options.h"
#include "json_report.h"
#include "output_file.h"

namespace ringpack::cli {

// job: BatchOptions -> Report; to_json: Report -> json; to_text: Report -> std::string.
template <class Job, class ToJson, class ToText>
void add_batch_report_command(CLI::App& app, const char* name, const char* description, Job job,
                              ToJson to_json, ToText to_text) {
  struct State {
    BatchFlags batch;
    ConfigKeys keys;
  };
  CLI::App* command = app.add_subcommand(name, description);
  auto state = std::make_shared<State>();
  state->batch.add_to(*command, state->keys);
  for (const char* key : kRunOnlyConfigKeys) state->keys.add_ignored(key);
  command->callback([state, job, to_json, to_text] {
    const auto report = job(state->batch.resolve(state->keys));
    const OutputOptions& output = state->batch.output();
    write_output(output.json ? json_text(to_json(report)) : to_text(report), output.output_file);
  });
}

}  // namespace ringpack::cli
