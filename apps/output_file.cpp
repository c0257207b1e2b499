// Atomic result files (output_file.h).
#include "output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>
#include <vector>

#include "ringpack/error.h"

namespace ringpack::cli {
namespace {

namespace fs = std::filesystem;

// Links followed before giving up (the kernel's own limit for path lookups is 40).
constexpr int kMaxLinks = 40;
constexpr mode_t kNewFileMode = 0666;  // before the umask, like any file the shell creates

// The file that `path` names: symbolic links followed (relative targets from the link's folder).
fs::path resolve_links(const std::string& path) {
  fs::path target = path;
  for (int hops = 0; hops < kMaxLinks; ++hops) {
    std::error_code error;
    if (!fs::is_symlink(fs::symlink_status(target, error))) return target;
    const fs::path next = fs::read_symlink(target, error);
    RINGPACK_CHECK(!error, "cannot read the link '", target.string(), "': ", error.message());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  RINGPACK_FAIL("--output '", path, "' is a chain of more than ", kMaxLinks,
                " symbolic links: give a file path");
}

// The mode of the file being replaced, or the default mode of a new file.
mode_t mode_for(const fs::path& target) {
  struct stat existing {};
  if (::stat(target.c_str(), &existing) == 0) return existing.st_mode & 07777;
  const mode_t mask = ::umask(0);
  ::umask(mask);
  return kNewFileMode & ~mask;
}

void write_all(int fd, const std::string& text, const std::string& temporary) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t written = ::write(fd, text.data() + done, text.size() - done);
    if (written < 0 && errno == EINTR) continue;
    RINGPACK_CHECK(written > 0, "writing '", temporary, "' failed: ", std::strerror(errno),
                   "; check free space");
    done += size_t(written);
  }
}

}  // namespace

void write_output(const std::string& text, const std::string& path) {
  if (path.empty()) {
    std::cout << text << std::flush;
    return;
  }
  const fs::path target = resolve_links(path);
  std::error_code ignored;
  RINGPACK_CHECK(!fs::is_directory(target, ignored), "--output '", path,
                 "' is a directory: give a file path");
  const fs::path folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  // mkstemp's template: a hidden name beside the target, XXXXXX replaced by a unique suffix.
  std::string hidden = ".";
  hidden.append(target.filename().string()).append(".XXXXXX");
  const std::string pattern = (folder / hidden).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  RINGPACK_CHECK(fd >= 0, "cannot create a file in '", folder.string(), "' for --output '", path,
                 "': ", std::strerror(errno), "; check that the folder exists and is writable");
  const std::string temporary(name.data());
  try {
    write_all(fd, text, temporary);
    RINGPACK_CHECK(::fchmod(fd, mode_for(target)) == 0, "cannot set the mode of '", temporary,
                   "': ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    RINGPACK_FAIL("writing '", temporary, "' failed: ", std::strerror(error), "; check free space");
  }
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    RINGPACK_FAIL("cannot rename '", temporary, "' to '", target.string(),
                  "': ", std::strerror(error));
  }
}

}  // namespace ringpack::cli
