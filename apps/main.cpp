// The `ringpack` command line: parse, dispatch to a subcommand, and turn every error into one
// line "ringpack: error: <message>" on stderr with exit status 2 (commands.h lists the statuses).
#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include "commands.h"
#include "core/excerpt.h"
#include "ringpack/error.h"
#include "ringpack/version.h"

namespace {

// An error line is one printable line of at most this many characters (docs/design.md §5).
constexpr size_t kMaxErrorLine = 300;
constexpr std::string_view kErrorPrefix = "ringpack: error: ";

int report_error(const std::string& message) {
  std::cerr << kErrorPrefix
            << ringpack::printable_line(message, kMaxErrorLine - kErrorPrefix.size()) << std::endl;
  return ringpack::cli::kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ringpack: context-parallel attention over packed sequences", "ringpack"};
  app.option_defaults()->always_capture_default();
  app.require_subcommand(0, 1);
  app.fallthrough();  // --verbose may follow the subcommand
  bool verbose = false;
  app.add_flag("--verbose", verbose, "on errors, also print where they were raised");
  app.set_version_flag("--version", std::string("ringpack ") + ringpack::source_commit(),
                       "print the source commit of this build and exit");

  ringpack::cli::add_run_command(app);
  ringpack::cli::add_plan_command(app);
  ringpack::cli::add_layout_command(app);
  ringpack::cli::add_bench_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help, version and the status of a finished run exit quietly with their own status.
    const bool quiet_exit =
        e.get_exit_code() == ringpack::cli::kExitSuccess || e.get_name() == "RuntimeError";
    if (quiet_exit) return app.exit(e);
    return report_error(e.what());
  } catch (const ringpack::Error& e) {
    const int status = report_error(e.what());
    if (verbose && !e.where().empty())
      std::cerr << "ringpack: where: " << ringpack::printable_line(e.where(), kMaxErrorLine)
                << std::endl;
    return status;
  } catch (const std::exception& e) {
    return report_error(e.what());
  }

  if (app.get_subcommands().empty()) std::cout << app.help();
  return ringpack::cli::kExitSuccess;
}
