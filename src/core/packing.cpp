// Packed batches from document lengths (greedy first-fit) and from user layout files
// (packing.h). Layout rules: docs/design.md §1-2 and §5.
#include "ringpack/packing.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "core/doc_lengths.h"
#include "core/excerpt.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

// The packer stops after this many documents in a row that fit in no row's free space: the rows
// are then nearly full and what is left becomes tail padding.
constexpr int kMaxConsecutiveMisses = 64;

struct SourceName {
  LengthSource source;
  const char* name;
};
constexpr SourceName kSourceNames[] = {
    {LengthSource::kRealistic, "realistic"},
    {LengthSource::kFile, "file"},
    {LengthSource::kFixed, "fixed"},
    {LengthSource::kUniform, "uniform"},
};

void check_shape(int batch, int seq_len) {
  RINGPACK_CHECK(batch >= 1, "--batch ", batch, " must be at least 1");
  RINGPACK_CHECK(seq_len >= 1, "--seq-len ", seq_len, " must be at least 1");
}

// Writes documents of the given lengths into `row` ([seq_len] ids and positions) in order:
// segment ids 1, 2, ..., positions 0.. per document; the rest stays padding (0, 0).
void write_row(const std::vector<int64_t>& doc_lengths, int32_t* segment_ids, int32_t* positions) {
  int64_t token = 0;
  int32_t segment = 0;
  for (const int64_t length : doc_lengths) {
    ++segment;
    for (int64_t p = 0; p < length; ++p, ++token) {
      segment_ids[token] = segment;
      positions[token] = int32_t(p);
    }
  }
}

}  // namespace

const char* length_source_name(LengthSource source) {
  for (const SourceName& entry : kSourceNames) {
    if (entry.source == source) return entry.name;
  }
  return "unknown";
}

LengthSource parse_length_source(std::string_view name) {
  for (const SourceName& entry : kSourceNames) {
    if (name == entry.name) return entry.source;
  }
  RINGPACK_FAIL("unknown --lengths '", excerpt(name),
                "'; expected realistic, file, fixed or uniform");
}

PackedBatch pack_documents(int batch, int seq_len, const PackerOptions& options) {
  check_shape(batch, seq_len);
  DocLengthSampler sampler(options);

  // docs[r]: lengths of the documents of row r in token order; row_free[r]: tokens still unused.
  std::vector<std::vector<int64_t>> docs(batch);
  std::vector<int64_t> row_free(batch, seq_len);
  if (!options.packing) {
    for (int r = 0; r < batch; ++r) docs[r].push_back(std::min<int64_t>(sampler.next(), seq_len));
  } else {
    int rows_full = 0;
    int misses = 0;
    while (rows_full < batch && misses < kMaxConsecutiveMisses) {
      // A document longer than a row becomes row-sized pieces, each a document of its own.
      int64_t remaining = sampler.next();
      while (remaining > 0 && rows_full < batch) {
        const int64_t piece = std::min<int64_t>(remaining, seq_len);
        remaining -= piece;
        int row = 0;
        while (row < batch && row_free[row] < piece) ++row;
        if (row == batch) {
          ++misses;
          continue;
        }
        misses = 0;
        docs[row].push_back(piece);
        row_free[row] -= piece;
        if (row_free[row] == 0) ++rows_full;
      }
    }
  }

  PackedBatch result;
  result.batch = batch;
  result.seq_len = seq_len;
  result.segment_ids.assign(size_t(batch) * seq_len, 0);
  result.positions.assign(size_t(batch) * seq_len, 0);
  for (int r = 0; r < batch; ++r) {
    write_row(docs[r], &result.segment_ids[size_t(r) * seq_len],
              &result.positions[size_t(r) * seq_len]);
  }
  return result;
}

namespace {

// The keys of a layout file (docs/design.md §5); any other key is an error.
constexpr const char* kLayoutKeys[] = {"segment_ids", "positions"};

// A JSON value as an error message quotes it: its kind for lists and objects (which may be
// nested arbitrarily deep), a short excerpt for strings and numbers.
std::string describe_json(const nlohmann::json& value) {
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  if (value.is_string()) return "the string '" + excerpt(value.get_ref<const std::string&>()) + "'";
  return excerpt(value.dump());  // a number, boolean or null: a short token
}

// Reads json[key] as [rows][tokens] int32 values; errors name the file, key, row and token.
std::vector<std::vector<int32_t>> read_rows(const nlohmann::json& json, const char* key,
                                            const std::string& path) {
  const nlohmann::json& rows = json.at(key);
  RINGPACK_CHECK(rows.is_array() && !rows.empty(), "layout file '", path, "': \"", key,
                 "\" must be a non-empty list of rows (lists of integers)");
  std::vector<std::vector<int32_t>> result;
  for (size_t r = 0; r < rows.size(); ++r) {
    const nlohmann::json& row = rows[r];
    RINGPACK_CHECK(row.is_array() && !row.empty(), "layout file '", path, "': \"", key, "\" row ",
                   r, " must be a non-empty list of integers");
    std::vector<int32_t> values;
    values.reserve(row.size());
    for (size_t t = 0; t < row.size(); ++t) {
      const nlohmann::json& value = row[t];
      const bool is_int32 = value.is_number_integer() &&
                            value.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                            value.get<int64_t>() <= std::numeric_limits<int32_t>::max();
      RINGPACK_CHECK(is_int32, "layout file '", path, "': \"", key, "\" row ", r, " token ", t,
                     " is ", describe_json(value), "; expected an integer");
      values.push_back(value.get<int32_t>());
    }
    if (!result.empty()) {
      RINGPACK_CHECK(values.size() == result[0].size(), "layout file '", path, "': \"", key,
                     "\" row ", r, " has ", values.size(), " tokens but row 0 has ",
                     result[0].size(), "; every row must have the same length");
    }
    result.push_back(std::move(values));
  }
  return result;
}

}  // namespace

namespace {

// Parses the layout file; a key that appears twice in one object is an error naming it.
nlohmann::json parse_layout_json(std::ifstream& file, const std::string& path) {
  std::vector<std::set<std::string>> open_objects;  // keys seen so far in each enclosing object
  const auto reject_duplicates = [&](int, nlohmann::json::parse_event_t event,
                                     nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) open_objects.emplace_back();
    if (event == Event::object_end) open_objects.pop_back();
    if (event == Event::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      RINGPACK_CHECK(open_objects.back().insert(key).second, "layout file '", path, "': key '",
                     excerpt(key), "' appears twice; give each key once");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(file, reject_duplicates);
  } catch (const nlohmann::json::exception& e) {
    RINGPACK_FAIL("layout file '", path,
                  "' is not valid JSON: ", excerpt(e.what(), 2 * kExcerptChars));
  }
}

void check_layout_keys(const nlohmann::json& json, const std::string& path) {
  RINGPACK_CHECK(json.is_object() && json.contains("segment_ids"), "layout file '", path,
                 "' has no \"segment_ids\" key; expected {\"segment_ids\": [[...], ...], "
                 "\"positions\": [[...], ...]} (positions optional)");
  for (const auto& entry : json.items()) {
    bool known = false;
    for (const char* key : kLayoutKeys) known = known || entry.key() == key;
    RINGPACK_CHECK(known, "layout file '", path, "': unknown key '", excerpt(entry.key()),
                   "'; a layout has only \"segment_ids\" and \"positions\"");
  }
}

}  // namespace

PackedBatch load_layout_file(const std::string& path) {
  std::error_code ignored;
  RINGPACK_CHECK(!std::filesystem::is_directory(path, ignored), "layout file '", path,
                 "' is a directory: give --layout the path of a JSON file");
  std::ifstream file(path);
  RINGPACK_CHECK(file.good(), "cannot open layout file '", path, "': check the --layout path");
  const nlohmann::json json = parse_layout_json(file, path);
  check_layout_keys(json, path);

  const std::vector<std::vector<int32_t>> ids = read_rows(json, "segment_ids", path);
  PackedBatch batch;
  batch.batch = int(ids.size());
  batch.seq_len = int(ids[0].size());
  for (const std::vector<int32_t>& row : ids) {
    batch.segment_ids.insert(batch.segment_ids.end(), row.begin(), row.end());
  }
  if (json.contains("positions")) {
    const std::vector<std::vector<int32_t>> positions = read_rows(json, "positions", path);
    RINGPACK_CHECK(positions.size() == ids.size() && positions[0].size() == ids[0].size(),
                   "layout file '", path, "': \"positions\" is ", positions.size(), " x ",
                   positions[0].size(), " but \"segment_ids\" is ", ids.size(), " x ",
                   ids[0].size(), "; both must have the same shape");
    for (const std::vector<int32_t>& row : positions) {
      batch.positions.insert(batch.positions.end(), row.begin(), row.end());
    }
  } else {
    batch.positions = derive_positions(batch.segment_ids, batch.batch, batch.seq_len);
  }
  try {
    validate_batch(batch);
  } catch (const Error& e) {
    throw Error("layout file '" + path + "': " + e.what(), e.where());
  }
  return batch;
}

}  // namespace ringpack
