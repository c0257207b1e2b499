// Writes a command's result to stdout or to a file, never leaving a partial file behind.
#pragma once

#include <string>

namespace ringpack::cli {

// Writes `text` to stdout when `path` is empty; otherwise to `path`.tmp, then renames it to
// `path`, so a failure leaves no partial file. Throws ringpack::Error naming the path.
void write_output(const std::string& text, const std::string& path);

}  // namespace ringpack::cli
