#include "fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

namespace ringpack::fuzz {
namespace {

std::string make_scratch_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/ringpack-fuzz-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    std::perror("ringpack fuzz: mkdtemp");
    std::abort();
  }
  return std::string(buffer.data());
}

void remove_scratch_dir() {
  std::error_code ignored;
  std::filesystem::remove_all(scratch_dir(), ignored);
}

}  // namespace

const std::string& scratch_dir() {
  // Never destroyed: remove_scratch_dir runs at exit, after static objects may be gone.
  static const std::string* const dir = [] {
    auto* made = new std::string(make_scratch_dir());
    std::atexit(remove_scratch_dir);
    return made;
  }();
  return *dir;
}

std::string write_scratch_file(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  file.close();
  if (!file) {
    std::fprintf(stderr, "ringpack fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

std::string write_scratch_file(const std::string& name, std::string_view text) {
  return write_scratch_file(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

void check_error_message(std::string_view message) {
  static const bool enabled = [] {
    const char* value = std::getenv("RINGPACK_FUZZ_CHECK_MESSAGES");
    return value != nullptr && std::string_view(value) == "1";
  }();
  if (!enabled) return;
  constexpr std::string_view kPrefix = "ringpack: error: ";
  const size_t printed = kPrefix.size() + message.size();
  bool control = false;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    control = control || (byte < 0x20 && byte != '\n') || byte == 0x7f;
  }
  if (printed > 300 || control) {
    std::fprintf(stderr, "ringpack fuzz: error line of %zu characters%s: %.300s\n", printed,
                 control ? " with control bytes" : "", std::string(message).c_str());
    std::abort();
  }
}

}  // namespace ringpack::fuzz
