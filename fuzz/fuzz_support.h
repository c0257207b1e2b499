// Shared by the libFuzzer harnesses of fuzz/ (docs/design.md §7): the input bound, a private
// scratch folder for inputs that the code under test reads from a file, and the optional check
// of error messages against the one-line contract of docs/design.md §5.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ringpack::fuzz {

// Larger inputs are skipped: the harnesses look for crashes in parsing, not for the time and
// memory that large valid inputs legitimately take.
inline constexpr size_t kMaxInputBytes = 64 * 1024;

// This process's scratch folder under $TMPDIR (or /tmp), created on first use and removed at
// exit. Each fuzzing process (libFuzzer -jobs/-workers) has its own.
const std::string& scratch_dir();

// Writes the bytes to scratch_dir()/name, replacing the file, and returns its path.
std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size);
std::string write_scratch_file(const std::string& name, std::string_view text);

// An error message the CLI would print (main.cpp: "ringpack: error: " + the message with
// newlines made spaces). With RINGPACK_FUZZ_CHECK_MESSAGES=1 in the environment, aborts (a
// finding) when the printed line is longer than 300 characters or holds control bytes; off by
// default.
void check_error_message(std::string_view message);

}  // namespace ringpack::fuzz
