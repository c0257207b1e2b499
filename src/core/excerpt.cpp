// Excerpts of user values for error messages (excerpt.h).
#include "core/excerpt.h"

#include <cstdio>

namespace ringpack {
namespace {

// The escaped form of one byte: itself when printable ASCII, else \n, \t, \r or \xHH.
std::string escape_byte(unsigned char c, bool escape_quotes) {
  switch (c) {
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\\':
      return escape_quotes ? "\\\\" : "\\";
    case '\'':
      return escape_quotes ? "\\'" : "'";
    default:
      break;
  }
  if (c >= 0x20 && c < 0x7f) return std::string(1, char(c));
  char hex[8];
  std::snprintf(hex, sizeof(hex), "\\x%02x", unsigned(c));
  return hex;
}

}  // namespace

std::string excerpt(std::string_view value, size_t max_chars) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string piece = escape_byte(static_cast<unsigned char>(value[i]), true);
    if (out.size() + piece.size() > max_chars) {
      return out + "... (" + std::to_string(value.size()) + " bytes)";
    }
    out += piece;
  }
  return out;
}

std::string printable_line(std::string_view message, size_t max_chars) {
  constexpr std::string_view kCut = "...";
  std::string out;
  for (const char c : message) {
    out += c == '\n' ? " " : escape_byte(static_cast<unsigned char>(c), false);
    if (out.size() > max_chars) {
      out.resize(max_chars > kCut.size() ? max_chars - kCut.size() : 0);
      return out + std::string(kCut);
    }
  }
  return out;
}

}  // namespace ringpack
