// Document-length sources for the packer; see doc_lengths.h. The realistic histogram is the
// table of data/doc_length_distribution.csv (docs/design.md §8), copied here so the library does
// not need the data folder at run time.
#include "core/doc_lengths.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/excerpt.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// Every document has at least one token (the first histogram bin starts at 0).
constexpr int64_t kMinDocLength = 1;

}  // namespace

const std::vector<LengthBin>& realistic_length_bins() {
  // Source: data/doc_length_distribution.csv (columns range and number), about 13.4 million
  // documents of a pretraining corpus. Lengths in tokens; bins are inclusive.
  static const std::vector<LengthBin> kBins = {
      {0, 10, 30254},         {11, 50, 391188},        {51, 100, 699596},
      {101, 200, 1377757},    {201, 500, 3794735},     {501, 1024, 3316785},
      {1025, 2048, 2106566},  {2049, 4096, 988525},    {4097, 8192, 410002},
      {8193, 16384, 173574},  {16385, 32768, 115007},  {32769, 65536, 18428},
      {65537, 131072, 22513}, {131073, 196608, 18284},
  };
  return kBins;
}

uint64_t uniform_below(std::mt19937_64& rng, uint64_t span) {
  // 2^64 mod span, computed in 64-bit unsigned arithmetic as (2^64 - span) mod span.
  const uint64_t reject_below = (uint64_t(0) - span) % span;
  uint64_t draw = rng();
  while (draw < reject_below) draw = rng();
  return draw % span;
}

std::vector<int64_t> read_lengths_file(const std::string& path) {
  std::ifstream file(path);
  RINGPACK_CHECK(file.good(), "cannot open lengths file '", path,
                 "': check the --lengths-file path");
  std::vector<int64_t> lengths;
  std::string line;
  for (int line_number = 1; std::getline(file, line); ++line_number) {
    line = line.substr(0, line.find('#'));
    for (char& c : line) {
      if (c == ',') c = ' ';
    }
    std::istringstream fields(line);
    std::string field;
    while (fields >> field) {
      bool digits = true;
      for (const char c : field) digits = digits && std::isdigit(static_cast<unsigned char>(c));
      // Lengths are token counts of one document; more than int32 tokens is never a real row.
      const bool in_range = digits && field.size() <= std::numeric_limits<int32_t>::digits10 &&
                            std::stoll(field) >= kMinDocLength;
      RINGPACK_CHECK(in_range, "lengths file '", path, "' line ", line_number, ": '",
                     excerpt(field),
                     "' is not a document length; expected positive integers (at most ",
                     std::numeric_limits<int32_t>::max(), ") separated by spaces or commas");
      lengths.push_back(std::stoll(field));
    }
  }
  RINGPACK_CHECK(!lengths.empty(), "lengths file '", path,
                 "' holds no document lengths; write positive integers separated by spaces, "
                 "commas or newlines");
  return lengths;
}

DocLengthSampler::DocLengthSampler(const PackerOptions& options)
    : options_(options), rng_(options.seed) {
  switch (options_.source) {
    case LengthSource::kRealistic:
      for (const LengthBin& bin : realistic_length_bins()) bins_total_ += bin.count;
      break;
    case LengthSource::kFile:
      RINGPACK_CHECK(!options_.lengths_file.empty(),
                     "--lengths file needs a file: pass --lengths-file PATH");
      file_lengths_ = read_lengths_file(options_.lengths_file);
      break;
    case LengthSource::kFixed:
      RINGPACK_CHECK(options_.fixed_length >= kMinDocLength, "--doc-length ", options_.fixed_length,
                     " must be at least 1 token");
      break;
    case LengthSource::kUniform:
      RINGPACK_CHECK(options_.uniform_min >= kMinDocLength, "--uniform-min ", options_.uniform_min,
                     " must be at least 1 token");
      RINGPACK_CHECK(options_.uniform_min <= options_.uniform_max, "--uniform-min ",
                     options_.uniform_min, " is larger than --uniform-max ", options_.uniform_max,
                     "; pass --uniform-min <= --uniform-max");
      break;
  }
  RINGPACK_CHECK(options_.max_doc_length >= 0, "--max-doc-length ", options_.max_doc_length,
                 " is negative; pass 0 for no cap or a positive token count");
}

int64_t DocLengthSampler::draw() {
  switch (options_.source) {
    case LengthSource::kRealistic: {
      // Pick a bin with probability count / total, then a length uniform inside it.
      int64_t ticket = int64_t(uniform_below(rng_, uint64_t(bins_total_)));
      for (const LengthBin& bin : realistic_length_bins()) {
        if (ticket < bin.count) {
          const int64_t lo = std::max(bin.lo, kMinDocLength);
          return lo + int64_t(uniform_below(rng_, uint64_t(bin.hi - lo + 1)));
        }
        ticket -= bin.count;
      }
      RINGPACK_FAIL("realistic length histogram is inconsistent (internal error)");
    }
    case LengthSource::kFile: {
      const int64_t length = file_lengths_[file_next_];
      file_next_ = (file_next_ + 1) % file_lengths_.size();
      return length;
    }
    case LengthSource::kFixed:
      return options_.fixed_length;
    case LengthSource::kUniform:
      return options_.uniform_min +
             int64_t(
                 uniform_below(rng_, uint64_t(options_.uniform_max - options_.uniform_min) + 1));
  }
  RINGPACK_FAIL("unknown length source ", int(options_.source));
}

int64_t DocLengthSampler::next() {
  const int64_t length = draw();
  return options_.max_doc_length > 0 ? std::min<int64_t>(length, options_.max_doc_length) : length;
}

}  // namespace ringpack
