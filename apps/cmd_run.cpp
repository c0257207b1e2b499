// `ringpack run`: build a batch, reorder, shard, run CP forward and backward, verify against the
// fp64 reference (ringpack::run_job), then print the report. Progress goes to stderr.
#include <iostream>
#include <memory>
#include <optional>

#include "batch_options.h"
#include "commands.h"
#include "json_report.h"
#include "kernel_flags.h"
#include "output_file.h"
#include "ringpack/error.h"
#include "text_report.h"
#include "trace_file.h"

namespace ringpack::cli {
namespace {

struct RunCommand {
  BatchFlags batch;
  ConfigKeys keys;
  std::string backend = backend_kind_name(RunOptions{}.backend);
  int threads = BackendOptions{}.num_threads;
  bool deterministic = BackendOptions{}.deterministic;
  KernelFlags kernels;
  std::optional<bool> verify = RunOptions{}.verify;  // unset: the job decides
  bool verify_flag = true;                           // --verify / --no-verify
  const CLI::Option* verify_option = nullptr;
  bool backward = RunOptions{}.backward;
  bool quiet = false;
  std::string comm;  // empty: the backend's default
  double comm_timeout = RunOptions{}.comm_timeout_seconds;
  std::string trace_file;
};

void run(RunCommand& command) {
  RunOptions options;
  options.batch = command.batch.resolve(command.keys);
  options.backend = parse_backend_kind(command.backend);
  options.backend_options.num_threads = command.threads;
  options.backend_options.deterministic = command.deterministic;
  command.kernels.apply(options.backend_options);
  options.verify = command.verify_option->count() > 0 ? command.verify_flag : command.verify;
  options.backward = command.backward;
  if (!command.comm.empty()) options.comm = parse_comm_kind(command.comm);
  RINGPACK_CHECK(command.comm_timeout > 0, "--comm-timeout ", command.comm_timeout,
                 " must be a positive number of seconds");
  options.comm_timeout_seconds = command.comm_timeout;

  ProgressFn progress;
  if (!command.quiet) progress = print_progress;
  const RunReport report = run_job(options, progress);

  // A multi-process run reports on rank 0; every rank exits with the shared verdict.
  if (report.process_rank == 0) {
    const OutputOptions& output = command.batch.output();
    write_output(output.json ? json_text(run_report_json(report)) : format_run_report(report),
                 output.output_file);
    if (!command.trace_file.empty()) write_output(trace_json(report), command.trace_file);
  }
  // A run that was not verified exits 0 and says NOT VERIFIED; only a failed check exits 1.
  if (report.verified && !report.passed) throw CLI::RuntimeError(kExitFail);
}

}  // namespace

void print_progress(const std::string& line) {
  std::cerr << "[ringpack] " << line << std::endl;
}

void add_run_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "run", "run CP attention forward and backward on a packed batch and verify it");
  auto state = std::make_shared<RunCommand>();
  state->batch.add_to(*command, state->keys);

  // Config keys of run only; keep in step with kRunOnlyConfigKeys (batch_options.h).
  const std::string group = "Run";
  CLI::Option* backend =
      command->add_option("--backend", state->backend, "reference|cpu|cuda")->group(group);
  state->keys.add("backend", backend, store_into(state->backend, "backend"));
  CLI::Option* threads =
      command->add_option("--threads", state->threads, "CPU worker threads (0 = all cores)")
          ->group(group);
  state->keys.add("threads", threads, store_into(state->threads, "threads"));
  state->verify_option =
      command
          ->add_flag("--verify,!--no-verify", state->verify_flag,
                     "compare with the fp64 reference (auto: when the reference is cheap)")
          ->option_text("[auto]")
          ->group(group);
  state->keys.add("verify", state->verify_option,
                  [state = state.get()](const YAML::Node& node, const std::filesystem::path&) {
                    state->verify = yaml_value<bool>(node, "verify");
                  });
  CLI::Option* backward =
      add_toggle(*command, "--backward,!--no-backward", state->backward, "run the backward pass")
          ->group(group);
  state->keys.add("backward", backward, store_into(state->backward, "backward"));
  CLI::Option* deterministic =
      command->add_flag("--deterministic", state->deterministic, "bit-reproducible accumulation")
          ->group(group);
  state->keys.add("deterministic", deterministic,
                  store_into(state->deterministic, "deterministic"));
  command->add_flag("--quiet", state->quiet, "no progress lines on stderr")->group(group);
  state->kernels.add_to(*command, "CUDA kernels", &state->keys);
  CLI::Option* comm =
      command
          ->add_option("--comm", state->comm,
                       "how ranks talk: threads (CPU ranks in this process), device (virtual "
                       "ranks of one GPU), mpi (one CPU rank per process, under mpirun), nccl "
                       "(one GPU per process, under torchrun or mpirun); default: threads, or "
                       "device with --backend cuda")
          ->group(group);
  state->keys.add("comm", comm, store_into(state->comm, "comm"));
  CLI::Option* comm_timeout =
      command
          ->add_option("--comm-timeout", state->comm_timeout,
                       "seconds any rank waits for a peer before it stops the run with an error")
          ->group(group);
  state->keys.add("comm_timeout", comm_timeout, store_into(state->comm_timeout, "comm_timeout"));
  command
      ->add_option("--trace", state->trace_file,
                   "write the step loops as Chrome trace JSON (Perfetto, chrome://tracing)")
      ->group(group);

  command->callback([state] { run(*state); });
}

}  // namespace ringpack::cli
