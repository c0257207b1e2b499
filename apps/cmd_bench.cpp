// STUB (owner: cuda / bench)
#include "commands.h"
namespace ringpack::cli {
void add_bench_command(CLI::App& app) { app.add_subcommand("bench", "benchmark (not built yet)"); }
}
