// The `ringpack` subcommands. Each add_*_command registers its options and callback.
#pragma once

#include <CLI/CLI.hpp>

namespace ringpack::cli {

void add_run_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_layout_command(CLI::App& app);
void add_bench_command(CLI::App& app);  // apps/cmd_bench.cpp (owner: cuda / bench)

}  // namespace ringpack::cli
