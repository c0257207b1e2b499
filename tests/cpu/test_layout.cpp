// Batch validation (docs/design.md §5), derived positions and the adversarial layouts themselves.
#include <gtest/gtest.h>

#include "ringpack/error.h"
#include "ringpack/layout.h"
#include "support/adversarial_layouts.h"

namespace ringpack {
namespace {

PackedBatch row(std::vector<int32_t> ids, std::vector<int32_t> pos) {
  PackedBatch batch;
  batch.batch = 1;
  batch.seq_len = int(ids.size());
  batch.segment_ids = std::move(ids);
  batch.positions = std::move(pos);
  return batch;
}

std::string error_of(const PackedBatch& batch) {
  try {
    validate_batch(batch);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Layout, AcceptsPackedRowWithPadding) {
  EXPECT_EQ(error_of(row({1, 1, 2, 2, 2, 0, 3, 0}, {0, 1, 0, 1, 2, 0, 0, 0})), "");
}

TEST(Layout, AcceptsNonContiguousPositionsInOrder) {
  EXPECT_EQ(error_of(row({1, 1, 1}, {0, 2, 7})), "");
}

TEST(Layout, RejectsNegativeIdsAndPositions) {
  EXPECT_NE(error_of(row({1, -1}, {0, 0})).find("segment id -1"), std::string::npos);
  EXPECT_NE(error_of(row({1, 1}, {0, -3})).find("position -3"), std::string::npos);
}

TEST(Layout, RejectsSegmentThatReappears) {
  const std::string message = error_of(row({1, 1, 2, 1}, {0, 1, 0, 2}));
  EXPECT_NE(message.find("segment id 1 appears again"), std::string::npos) << message;
}

TEST(Layout, RejectsPaddingInsideADocumentNamingThePosition) {
  const std::string message = error_of(row({1, 0, 1, 2}, {0, 0, 1, 0}));
  EXPECT_NE(message.find("segment id 1 appears again at row 0, token 2 after padding at token 1"),
            std::string::npos)
      << message;
  EXPECT_EQ(error_of(row({1, 0, 0, 2}, {0, 0, 0, 0})), "");  // padding between documents
}

TEST(Layout, RejectsPositionsThatDoNotIncrease) {
  const std::string message = error_of(row({1, 1, 1}, {0, 2, 2}));
  EXPECT_NE(message.find("do not increase"), std::string::npos) << message;
}

TEST(Layout, RejectsMismatchedSizes) {
  PackedBatch batch = row({1, 1, 1}, {0, 1});
  EXPECT_NE(error_of(batch).find("positions hold 2"), std::string::npos);
}

TEST(Layout, DerivesPositionsPerSegment) {
  const std::vector<int32_t> ids{1, 1, 0, 2, 2, 2, 0, 0, 1, 0};
  const auto pos = derive_positions(ids, 2, 5);
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 0, 0, 1, 0, 0, 0, 0, 0}));  // row 1 restarts
}

TEST(Layout, CountsDocuments) {
  EXPECT_EQ(count_documents(row({1, 1, 0, 2, 3, 0}, {0, 1, 0, 0, 0, 0})), (std::vector<int>{3}));
}

TEST(Layout, AdversarialLayoutsAreValidForManyShapes) {
  for (int cp : {1, 2, 3, 4, 8}) {
    for (int seq_len : {2 * cp * 3, 2 * cp * 5, 96}) {
      if (seq_len % (2 * cp) != 0) continue;
      for (const auto& layout : testing::adversarial_layouts(seq_len, cp)) {
        SCOPED_TRACE(layout.name);
        EXPECT_NO_THROW(validate_batch(layout.batch));
      }
    }
  }
  const auto random = testing::random_packed_batch(3, 50, 7);
  EXPECT_NO_THROW(validate_batch(random));
}

}  // namespace
}  // namespace ringpack
