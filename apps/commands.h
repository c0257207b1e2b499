// The `ringpack` subcommands. Each add_*_command registers its options and callback.
//
// Exit status: 0 success (run: PASS, or NOT VERIFIED), 1 run verified and FAILED, 2 bad input or
// any error. A callback signals status 1 by throwing CLI::RuntimeError(kExitFail); errors are
// thrown as ringpack::Error and printed by main as one line "ringpack: error: <message>".
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace ringpack::cli {

inline constexpr int kExitSuccess = 0;
inline constexpr int kExitFail = 1;
inline constexpr int kExitBadInput = 2;

// Prints one progress line "[ringpack] <line>" on stderr.
void print_progress(const std::string& line);

void add_run_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_layout_command(CLI::App& app);
void add_bench_command(CLI::App& app);  // apps/cmd_bench.cpp (owner: cuda / bench)

}  // namespace ringpack::cli
