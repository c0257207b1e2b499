// Atomic result files (output_file.h).
#include "output_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <system_error>

#include "ringpack/error.h"

namespace ringpack::cli {

void write_output(const std::string& text, const std::string& path) {
  if (path.empty()) {
    std::cout << text << std::flush;
    return;
  }
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    RINGPACK_CHECK(file.good(), "cannot open '", temporary,
                   "' for writing: check that the folder of --output exists and is writable");
    file << text;
    file.close();
    if (!file) {
      std::remove(temporary.c_str());
      RINGPACK_FAIL("writing '", temporary, "' failed: check free space");
    }
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::remove(temporary.c_str());
    RINGPACK_FAIL("cannot rename '", temporary, "' to '", path, "': ", error.message());
  }
}

}  // namespace ringpack::cli
