// Tests for the packer (greedy first-fit over document-length sources) and layout-file loading
// (packing.h; layout rules in docs/design.md §1-2 and §5).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/doc_lengths.h"
#include "ringpack/error.h"
#include "ringpack/layout.h"
#include "ringpack/packing.h"

namespace ringpack {
namespace {

std::string current_test_name() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

uint64_t test_seed() {
  return std::hash<std::string>{}(current_test_name());
}

// A file under the gtest temp dir named after the test, holding `text`; removed on destruction.
class TempFile {
 public:
  TempFile(const std::string& suffix, const std::string& text)
      : path_(::testing::TempDir() + "ringpack_" + current_test_name() + suffix) {
    std::ofstream(path_) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The message of the ringpack::Error `fn` throws ("" when it throws none).
std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Lengths of the documents of `row`, in token order (the packer writes ids 1, 2, ... and
// positions 0.. per document; padding only at the tail). Fails the test on any other layout.
std::vector<int> row_documents(const PackedBatch& batch, int row) {
  std::vector<int> lengths;
  bool in_padding = false;
  for (int t = 0; t < batch.seq_len; ++t) {
    const int32_t id = batch.segment_id(row, t);
    const int32_t pos = batch.position(row, t);
    if (id == 0) {
      in_padding = true;
      EXPECT_EQ(pos, 0) << "row " << row << " token " << t;
      continue;
    }
    EXPECT_FALSE(in_padding) << "row " << row << " token " << t << ": document after padding";
    if (id == int32_t(lengths.size())) {
      EXPECT_EQ(pos, lengths.back()) << "row " << row << " token " << t;
      ++lengths.back();
    } else {
      EXPECT_EQ(id, int32_t(lengths.size()) + 1) << "row " << row << " token " << t;
      EXPECT_EQ(pos, 0) << "row " << row << " token " << t;
      lengths.push_back(1);
    }
  }
  return lengths;
}

int padding_tokens(const PackedBatch& batch) {
  int padding = 0;
  for (const int32_t id : batch.segment_ids) padding += id == 0;
  return padding;
}

PackerOptions options_for(LengthSource source, uint64_t seed) {
  PackerOptions options;
  options.source = source;
  options.seed = seed;
  options.fixed_length = 700;
  options.uniform_min = 3;
  options.uniform_max = 900;
  return options;
}

TEST(Packer, SameSeedGivesSameBatch) {
  const PackerOptions options = options_for(LengthSource::kRealistic, test_seed());
  const PackedBatch a = pack_documents(3, 4096, options);
  const PackedBatch b = pack_documents(3, 4096, options);
  EXPECT_EQ(a.segment_ids, b.segment_ids);
  EXPECT_EQ(a.positions, b.positions);
}

TEST(Packer, DifferentSeedGivesDifferentBatch) {
  PackerOptions options = options_for(LengthSource::kUniform, test_seed());
  const PackedBatch a = pack_documents(2, 4096, options);
  options.seed += 1;
  const PackedBatch b = pack_documents(2, 4096, options);
  EXPECT_NE(a.segment_ids, b.segment_ids);
}

TEST(Packer, SeedZeroRealisticLengthsArePinned) {
  // The first lengths of seed 0 from the built-in histogram; they change only when the sampling
  // arithmetic changes, which would silently change every benchmark workload.
  DocLengthSampler sampler(options_for(LengthSource::kRealistic, 0));
  std::vector<int64_t> first;
  for (int i = 0; i < 6; ++i) first.push_back(sampler.next());
  EXPECT_EQ(first, (std::vector<int64_t>{740, 1263, 119, 3817, 1562, 105}));
}

TEST(Packer, EveryRowIsValidForEverySource) {
  const TempFile lengths(".txt", "17 250, 3\n1200\n");
  for (const LengthSource source : {LengthSource::kRealistic, LengthSource::kFile,
                                    LengthSource::kFixed, LengthSource::kUniform}) {
    for (const bool packing : {true, false}) {
      PackerOptions options = options_for(source, test_seed());
      options.lengths_file = lengths.path();
      options.packing = packing;
      const PackedBatch batch = pack_documents(3, 1000, options);
      SCOPED_TRACE(std::string(length_source_name(source)) + (packing ? " packed" : " unpacked"));
      ASSERT_EQ(batch.batch, 3);
      ASSERT_EQ(batch.seq_len, 1000);
      ASSERT_EQ(batch.segment_ids.size(), 3000u);
      ASSERT_EQ(batch.positions.size(), 3000u);
      EXPECT_NO_THROW(validate_batch(batch));
      for (int r = 0; r < batch.batch; ++r) {
        const std::vector<int> docs = row_documents(batch, r);
        EXPECT_FALSE(docs.empty()) << "row " << r;
        if (!packing) {
          EXPECT_EQ(docs.size(), 1u) << "row " << r;
        }
      }
    }
  }
}

TEST(Packer, RealisticWithCapLeavesLittlePadding) {
  const int seq_len = 16384;
  PackerOptions options = options_for(LengthSource::kRealistic, test_seed());
  options.max_doc_length = seq_len / 4;
  const PackedBatch batch = pack_documents(4, seq_len, options);
  // First-fit keeps placing short documents until 64 in a row fit nowhere.
  EXPECT_LT(padding_tokens(batch), batch.batch * seq_len / 100);
  for (int r = 0; r < batch.batch; ++r) {
    for (const int length : row_documents(batch, r)) EXPECT_LE(length, seq_len / 4);
  }
}

TEST(Packer, FirstFitPlacesDocumentsInTheFirstRowWithRoom) {
  // Lengths 6, 7, 3, 4, 6, 7, 3, ... (the file repeats) into rows of 10: 6 -> row 0, 7 -> row 1,
  // 3 -> row 0, 4 -> row 2, 6 -> row 2, 7 fits nowhere, 3 -> row 1; then only row 0 has room
  // (1 token) and nothing fits.
  const TempFile lengths(".txt", "6\n7\n3\n4\n");
  PackerOptions options = options_for(LengthSource::kFile, test_seed());
  options.lengths_file = lengths.path();
  const PackedBatch batch = pack_documents(3, 10, options);
  EXPECT_EQ(row_documents(batch, 0), (std::vector<int>{6, 3}));
  EXPECT_EQ(row_documents(batch, 1), (std::vector<int>{7, 3}));
  EXPECT_EQ(row_documents(batch, 2), (std::vector<int>{4, 6}));
}

TEST(Packer, LongDocumentsAreSplitIntoRowSizedPieces) {
  // 40 tokens into rows of 16: pieces 16, 16, 8; the next document's full pieces fit nowhere,
  // its 8-token piece completes row 2.
  PackerOptions options = options_for(LengthSource::kFixed, test_seed());
  options.fixed_length = 40;
  const PackedBatch batch = pack_documents(3, 16, options);
  EXPECT_EQ(row_documents(batch, 0), (std::vector<int>{16}));
  EXPECT_EQ(row_documents(batch, 1), (std::vector<int>{16}));
  EXPECT_EQ(row_documents(batch, 2), (std::vector<int>{8, 8}));
  EXPECT_EQ(padding_tokens(batch), 0);
}

TEST(Packer, StopsWhenNoDocumentFits) {
  // 12-token documents in rows of 16: one per row, 4 tokens of tail padding each.
  PackerOptions options = options_for(LengthSource::kFixed, test_seed());
  options.fixed_length = 12;
  const PackedBatch batch = pack_documents(2, 16, options);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(row_documents(batch, r), (std::vector<int>{12}));
}

TEST(Packer, PackingOffPutsOneCappedDocumentPerRow) {
  PackerOptions options = options_for(LengthSource::kFixed, test_seed());
  options.packing = false;
  options.fixed_length = 10;
  const PackedBatch short_docs = pack_documents(2, 16, options);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(row_documents(short_docs, r), (std::vector<int>{10}));
  options.fixed_length = 100;
  const PackedBatch long_docs = pack_documents(2, 16, options);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(row_documents(long_docs, r), (std::vector<int>{16}));
}

TEST(Packer, MaxDocLengthCapsEverySource) {
  PackerOptions options = options_for(LengthSource::kUniform, test_seed());
  options.uniform_min = 50;
  options.uniform_max = 60;
  options.max_doc_length = 20;
  const PackedBatch batch = pack_documents(1, 100, options);
  EXPECT_EQ(row_documents(batch, 0), (std::vector<int>{20, 20, 20, 20, 20}));
}

TEST(Packer, FileLengthsAreReadInOrderWithCommasAndComments) {
  const TempFile lengths(".txt", "3, 5 # first line\n\n# only a comment\n2\n");
  EXPECT_EQ(read_lengths_file(lengths.path()), (std::vector<int64_t>{3, 5, 2}));
  PackerOptions options = options_for(LengthSource::kFile, test_seed());
  options.lengths_file = lengths.path();
  const PackedBatch batch = pack_documents(1, 10, options);
  EXPECT_EQ(row_documents(batch, 0), (std::vector<int>{3, 5, 2}));
}

TEST(Packer, RealisticLengthsStayInsideTheHistogram) {
  const std::vector<LengthBin>& bins = realistic_length_bins();
  DocLengthSampler sampler(options_for(LengthSource::kRealistic, test_seed()));
  for (int i = 0; i < 10000; ++i) {
    const int64_t length = sampler.next();
    ASSERT_GE(length, 1);
    ASSERT_LE(length, bins.back().hi);
  }
}

TEST(Packer, RealisticBinsMatchTheDataFile) {
  std::ifstream csv(std::string(RINGPACK_SOURCE_DIR) + "/data/doc_length_distribution.csv");
  ASSERT_TRUE(csv.good());
  std::vector<LengthBin> from_file;
  std::string line;
  while (std::getline(csv, line)) {
    LengthBin bin{};
    long long lo = 0, hi = 0, count = 0;
    if (std::sscanf(line.c_str(), "\"[%lld, %lld]\",%lld", &lo, &hi, &count) != 3) continue;
    bin.lo = lo;
    bin.hi = hi;
    bin.count = count;
    from_file.push_back(bin);
  }
  const std::vector<LengthBin>& table = realistic_length_bins();
  ASSERT_EQ(from_file.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(table[i].lo, from_file[i].lo) << "bin " << i;
    EXPECT_EQ(table[i].hi, from_file[i].hi) << "bin " << i;
    EXPECT_EQ(table[i].count, from_file[i].count) << "bin " << i;
  }
}

TEST(Packer, UniformBelowCoversTheRangeEvenly) {
  std::mt19937_64 rng(test_seed());
  constexpr int kSpan = 7;
  constexpr int kDraws = 70000;
  std::vector<int> hits(kSpan, 0);
  for (int i = 0; i < kDraws; ++i) ++hits[uniform_below(rng, kSpan)];
  // Expected 10000 each; 5 sigma is about 460.
  for (int v = 0; v < kSpan; ++v) EXPECT_NEAR(hits[v], kDraws / kSpan, 500) << "value " << v;
}

TEST(Packer, LengthSourceNamesRoundTrip) {
  for (const LengthSource source : {LengthSource::kRealistic, LengthSource::kFile,
                                    LengthSource::kFixed, LengthSource::kUniform}) {
    EXPECT_EQ(parse_length_source(length_source_name(source)), source);
  }
  const std::string message = error_message([] { parse_length_source("zipf"); });
  EXPECT_NE(message.find("zipf"), std::string::npos) << message;
}

TEST(Packer, BadOptionsThrowNamingTheValue) {
  const uint64_t seed = test_seed();
  PackerOptions uniform = options_for(LengthSource::kUniform, seed);
  uniform.uniform_min = 9;
  uniform.uniform_max = 4;
  EXPECT_NE(error_message([&] {
              pack_documents(1, 16, uniform);
            }).find("--uniform-min 9 is larger than --uniform-max 4"),
            std::string::npos);
  uniform.uniform_min = 0;
  EXPECT_NE(error_message([&] { pack_documents(1, 16, uniform); }).find("--uniform-min 0"),
            std::string::npos);

  const PackerOptions fine = options_for(LengthSource::kFixed, seed);
  EXPECT_NE(error_message([&] { pack_documents(0, 16, fine); }).find("--batch 0"),
            std::string::npos);
  EXPECT_NE(error_message([&] { pack_documents(1, -3, fine); }).find("--seq-len -3"),
            std::string::npos);

  PackerOptions fixed = fine;
  fixed.fixed_length = 0;
  EXPECT_NE(error_message([&] { pack_documents(1, 16, fixed); }).find("--doc-length 0"),
            std::string::npos);
  PackerOptions capped = fine;
  capped.max_doc_length = -5;
  EXPECT_NE(error_message([&] { pack_documents(1, 16, capped); }).find("--max-doc-length -5"),
            std::string::npos);
  PackerOptions no_file = options_for(LengthSource::kFile, seed);
  EXPECT_NE(error_message([&] { pack_documents(1, 16, no_file); }).find("--lengths-file"),
            std::string::npos);
  no_file.lengths_file = ::testing::TempDir() + "ringpack_no_such_lengths_file.txt";
  EXPECT_NE(error_message([&] { pack_documents(1, 16, no_file); }).find(no_file.lengths_file),
            std::string::npos);
}

TEST(Packer, BadLengthsFileNamesFileLineAndValue) {
  for (const std::string bad : {"abc", "0", "-4", "2.5", "99999999999"}) {
    const TempFile lengths(".txt", "5 6\n7, " + bad + "\n");
    const std::string message = error_message([&] { read_lengths_file(lengths.path()); });
    EXPECT_NE(message.find(lengths.path()), std::string::npos) << message;
    EXPECT_NE(message.find("line 2"), std::string::npos) << message;
    EXPECT_NE(message.find("'" + bad + "'"), std::string::npos) << message;
  }
  const TempFile empty(".txt", "# nothing here\n");
  EXPECT_NE(error_message([&] { read_lengths_file(empty.path()); }).find("no document lengths"),
            std::string::npos);
}

TEST(LayoutFile, LoadsIdsAndPositions) {
  const TempFile file(".json",
                      R"({"segment_ids": [[1, 1, 2, 0], [3, 3, 3, 3]],
                          "positions":   [[4, 5, 0, 0], [0, 1, 2, 3]]})");
  const PackedBatch batch = load_layout_file(file.path());
  EXPECT_EQ(batch.batch, 2);
  EXPECT_EQ(batch.seq_len, 4);
  EXPECT_EQ(batch.segment_ids, (std::vector<int32_t>{1, 1, 2, 0, 3, 3, 3, 3}));
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{4, 5, 0, 0, 0, 1, 2, 3}));
}

TEST(LayoutFile, DerivesPositionsWhenAbsent) {
  const TempFile file(".json", R"({"segment_ids": [[1, 1, 1, 2, 2, 0]]})");
  const PackedBatch batch = load_layout_file(file.path());
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 0}));
}

// Loading `json` fails with a ringpack::Error naming the file and containing `expected`.
void expect_layout_error(const std::string& json, const std::string& expected) {
  const TempFile file(".json", json);
  const std::string message = error_message([&] { load_layout_file(file.path()); });
  EXPECT_NE(message.find(file.path()), std::string::npos) << message;
  EXPECT_NE(message.find(expected), std::string::npos) << message;
}

TEST(LayoutFile, RaggedRowsAreRejected) {
  expect_layout_error(R"({"segment_ids": [[1, 1, 1], [1, 1]]})", "row 1 has 2 tokens");
}

TEST(LayoutFile, MissingKeyIsRejected) {
  expect_layout_error(R"({"positions": [[0, 1]]})", "\"segment_ids\"");
}

TEST(LayoutFile, BadJsonIsRejected) {
  expect_layout_error(R"({"segment_ids": [[1, 1)", "not valid JSON");
}

TEST(LayoutFile, NonIntegerValueIsRejected) {
  expect_layout_error(R"({"segment_ids": [[1, 1.5]]})", "row 0 token 1 is 1.5");
  expect_layout_error(R"({"segment_ids": [[1, "a"]]})", "row 0 token 1");
}

TEST(LayoutFile, PositionsShapeMismatchIsRejected) {
  expect_layout_error(R"({"segment_ids": [[1, 1]], "positions": [[0, 1, 2]]})", "same shape");
  expect_layout_error(R"({"segment_ids": [[1, 1], [1, 1]], "positions": [[0, 1]]})", "same shape");
}

TEST(LayoutFile, InvalidLayoutIsRejectedByValidation) {
  // Segment 1 reappears after segment 2 started (docs/design.md §5).
  const TempFile file(".json", R"({"segment_ids": [[1, 2, 1, 0]]})");
  EXPECT_THROW(load_layout_file(file.path()), Error);
  const std::string message = error_message([&] { load_layout_file(file.path()); });
  EXPECT_NE(message.find(file.path()), std::string::npos) << message;
}

TEST(LayoutFile, MissingFileIsRejected) {
  const std::string path = ::testing::TempDir() + "ringpack_no_such_layout.json";
  EXPECT_NE(error_message([&] { load_layout_file(path); }).find(path), std::string::npos);
}

}  // namespace
}  // namespace ringpack
