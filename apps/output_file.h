// Writes a command's result to stdout or to a file, never leaving a partial file behind.
#pragma once

#include <string>

namespace ringpack::cli {

// Writes `text` to stdout when `path` is empty. Otherwise writes it to a new temporary file
// (mkstemp) in the folder of the file `path` names, then renames it over that file: readers see
// the old or the new content, never a part, and concurrent writers never share a temporary file.
// When `path` is a symbolic link, the file it points to is replaced and the link is kept. On
// failure the temporary file is removed and ringpack::Error names the path.
void write_output(const std::string& text, const std::string& path);

}  // namespace ringpack::cli
