// Short, printable quotes of user values for error messages (docs/design.md §5): a bad value is
// never copied whole into a message, and no control byte reaches the terminal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ringpack {

// Longest part of a bad value that an error message quotes.
inline constexpr size_t kExcerptChars = 60;

// `value` with control bytes, quotes, backslashes and non-ASCII bytes escaped (\n, \t, \xHH),
// cut after `max_chars` characters of output with "..." and the value's size in bytes appended.
std::string excerpt(std::string_view value, size_t max_chars = kExcerptChars);

// `message` on one printable line of at most `max_chars` characters: newlines become spaces,
// other control bytes are escaped, and a longer message is cut with "...".
std::string printable_line(std::string_view message, size_t max_chars);

}  // namespace ringpack
