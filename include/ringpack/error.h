// ringpack::Error and the RINGPACK_CHECK family.
//
// Library code throws ringpack::Error; tools catch it, print what() and exit with status 2.
// what() is the user-facing message (it names the value and the fix); where() names the failed
// expression, file:line and, inside a CP run, the rank.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ringpack {

class Error : public std::runtime_error {
 public:
  Error(std::string message, std::string where = {})
      : std::runtime_error(std::move(message)), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

namespace detail {

// Rank of the calling thread inside a CP run (-1 outside one); named in error locations.
int current_rank();
void set_current_rank(int rank);

std::string error_location(const char* expr, const char* file, int line);

template <class... Args>
std::string concat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

template <class... Args>
[[noreturn]] void throw_error(const char* expr, const char* file, int line, Args&&... args) {
  throw Error(concat(std::forward<Args>(args)...), error_location(expr, file, line));
}

}  // namespace detail
}  // namespace ringpack

// Throws ringpack::Error with the streamed message when cond is false.
#define RINGPACK_CHECK(cond, ...)                                                         \
  do {                                                                                    \
    if (!(cond)) ::ringpack::detail::throw_error(#cond, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// Throws unconditionally (for unreachable branches and unknown names).
#define RINGPACK_FAIL(...) ::ringpack::detail::throw_error("", __FILE__, __LINE__, __VA_ARGS__)
