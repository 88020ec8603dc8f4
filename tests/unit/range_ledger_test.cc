// The bookkeeping both backends keep (SimBackend and CudaVmmBackend), without a device: every
// REQUIRES of MemoryBackend that the ledger enforces, and that taking ranges out hands back
// exactly what was put in.
#include "core/memory/range_ledger.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace siesta {
namespace {

constexpr size_t kG = 2u << 20;  // granularity, as on the H200
constexpr DeviceAddress kBase = 0x7f0000000000;

using Ledger = RangeLedger<std::string, int>;  // Space names the reservation; Memory tags

class RangeLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override { ledger.add_reservation({kBase, 16 * kG}, "r0"); }

  Status commit(size_t first_granule, size_t granules, int tag) {
    DeviceRange range{kBase + first_granule * kG, granules * kG};
    SIESTA_RETURN_IF_ERROR(ledger.check_commit(range, kG));
    ledger.add_commit(range, tag);
    return Status::Ok();
  }
  static DeviceRange g(size_t first_granule, size_t granules) {
    return {kBase + first_granule * kG, granules * kG};
  }

  Ledger ledger;
};

TEST_F(RangeLedgerTest, CountsReservedAndCommittedBytes) {
  EXPECT_EQ(ledger.reserved_bytes(), 16 * kG);
  ASSERT_TRUE(commit(0, 4, 1).ok());
  ASSERT_TRUE(commit(4, 2, 2).ok());
  EXPECT_EQ(ledger.committed_bytes(), 6 * kG);
}

TEST_F(RangeLedgerTest, CommitChecks) {
  EXPECT_EQ(ledger.check_commit({kBase, 0}, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.check_commit({kBase + kG / 2, kG}, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.check_commit({kBase, kG + 1}, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.check_commit(g(15, 2), kG).code(), StatusCode::kFailedPrecondition)
      << "runs past the reservation";
  EXPECT_EQ(ledger.check_commit(g(16, 1), kG).code(), StatusCode::kFailedPrecondition)
      << "just past the reservation";
  EXPECT_EQ(ledger.check_commit({kBase - kG, kG}, kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_commit({~DeviceAddress{0} - kG + 1, 2 * kG}, kG).code(),
            StatusCode::kInvalidArgument)
      << "wraps";
  ASSERT_TRUE(commit(2, 4, 1).ok());
  EXPECT_EQ(ledger.check_commit(g(2, 4), kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_commit(g(5, 2), kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_commit(g(0, 3), kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_commit(g(0, 16), kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ledger.check_commit(g(0, 2), kG).ok());
  EXPECT_TRUE(ledger.check_commit(g(6, 10), kG).ok());
}

TEST_F(RangeLedgerTest, DecommitTakesWholeCommitsOnly) {
  ASSERT_TRUE(commit(0, 4, 1).ok());
  ASSERT_TRUE(commit(4, 2, 2).ok());
  ASSERT_TRUE(commit(8, 2, 3).ok());
  EXPECT_EQ(ledger.check_decommit(g(0, 2), kG).code(), StatusCode::kFailedPrecondition) << "part";
  EXPECT_EQ(ledger.check_decommit(g(2, 4), kG).code(), StatusCode::kFailedPrecondition) << "part";
  EXPECT_EQ(ledger.check_decommit(g(0, 5), kG).code(), StatusCode::kFailedPrecondition) << "part";
  EXPECT_EQ(ledger.check_decommit(g(4, 4), kG).code(), StatusCode::kFailedPrecondition) << "hole";
  EXPECT_EQ(ledger.check_decommit(g(6, 2), kG).code(), StatusCode::kFailedPrecondition) << "none";
  EXPECT_EQ(ledger.check_decommit(g(0, 10), kG).code(), StatusCode::kFailedPrecondition) << "hole";
  EXPECT_EQ(ledger.check_decommit(g(15, 2), kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_decommit({kBase, 0}, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.check_decommit({kBase + kG / 2, kG}, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.check_decommit({kBase, kG + 1}, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.committed_bytes(), 8 * kG) << "checks change nothing";

  ASSERT_TRUE(ledger.check_decommit(g(0, 6), kG).ok()) << "two adjacent commits, whole";
  std::vector<int> taken = ledger.take_commits(g(0, 6));
  EXPECT_EQ(taken, (std::vector<int>{1, 2}));
  EXPECT_EQ(ledger.committed_bytes(), 2 * kG);
  EXPECT_TRUE(ledger.check_commit(g(0, 6), kG).ok()) << "committable again";
}

TEST_F(RangeLedgerTest, CommittedCheckFollowsAdjacentCommits) {
  ASSERT_TRUE(commit(0, 4, 1).ok());
  ASSERT_TRUE(commit(4, 2, 2).ok());
  ASSERT_TRUE(commit(8, 2, 3).ok());
  EXPECT_TRUE(ledger.check_committed({kBase + 100, 6 * kG - 200}, "copy").ok());
  EXPECT_TRUE(ledger.check_committed({kBase + 4 * kG - 1, 2}, "copy").ok()) << "boundary";
  EXPECT_TRUE(ledger.check_committed({kBase + 20 * kG, 0}, "copy").ok()) << "empty";
  Status gap = ledger.check_committed({kBase + 6 * kG - 1, 2}, "copy source");
  EXPECT_EQ(gap.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(gap.message().find("copy source"), std::string::npos) << gap.message();
  EXPECT_EQ(ledger.check_committed({kBase - 1, 2}, "copy").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_committed({kBase + 12 * kG, 1}, "copy").code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_committed({kBase + 9 * kG, 2 * kG}, "copy").code(),
            StatusCode::kFailedPrecondition)
      << "runs off the last commit";
  EXPECT_EQ(ledger.check_committed({~DeviceAddress{0}, 2}, "copy").code(),
            StatusCode::kInvalidArgument);
}

TEST_F(RangeLedgerTest, TakingAReservationTakesItsCommits) {
  ledger.add_reservation({kBase + 32 * kG, 4 * kG}, "r1");
  ASSERT_TRUE(commit(0, 4, 1).ok());
  ASSERT_TRUE(commit(10, 2, 2).ok());
  ASSERT_TRUE(ledger.check_commit({kBase + 32 * kG, 4 * kG}, kG).ok());
  ledger.add_commit({kBase + 32 * kG, 4 * kG}, 9);

  EXPECT_FALSE(ledger.take_reservation({kBase, 8 * kG})) << "not exactly a reservation";
  EXPECT_FALSE(ledger.take_reservation({kBase + kG, 15 * kG}));
  EXPECT_EQ(ledger.reservation_ranges().size(), 2u);

  auto taken = ledger.take_reservation({kBase, 16 * kG});
  ASSERT_TRUE(taken);
  EXPECT_EQ(taken->space, "r0");
  EXPECT_EQ(taken->commits, (std::vector<int>{1, 2}));
  EXPECT_EQ(ledger.reserved_bytes(), 4 * kG);
  EXPECT_EQ(ledger.committed_bytes(), 4 * kG) << "the other reservation's commit stays";
  EXPECT_EQ(ledger.check_commit(g(0, 1), kG).code(), StatusCode::kFailedPrecondition)
      << "no longer reserved";
}

TEST_F(RangeLedgerTest, DecommitStaysInsideOneReservationButCopiesMaySpanTwo) {
  ledger.add_reservation(g(16, 4), "r1");  // adjacent to r0
  ASSERT_TRUE(commit(15, 1, 1).ok());
  ASSERT_TRUE(commit(16, 1, 2).ok());
  EXPECT_EQ(ledger.check_commit(g(14, 4), kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_decommit(g(15, 2), kG).code(), StatusCode::kFailedPrecondition)
      << "two whole commits, but in two reservations";
  EXPECT_TRUE(ledger.check_decommit(g(15, 1), kG).ok());
  EXPECT_TRUE(ledger.check_committed(g(15, 2), "copy").ok()) << "every byte is committed";
}

TEST_F(RangeLedgerTest, WrappingRangesAreInvalidEverywhere) {
  const DeviceRange wraps{~DeviceAddress{0} - kG + 1, 2 * kG};
  EXPECT_EQ(ledger.check_commit(wraps, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.check_decommit(wraps, kG).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger.check_committed(wraps, "zero").code(), StatusCode::kInvalidArgument);
  const DeviceRange to_zero{~DeviceAddress{0} - kG + 1, kG};  // ends exactly at 2^64
  EXPECT_EQ(ledger.check_commit(to_zero, 1).code(), StatusCode::kInvalidArgument);
}

// A decommit waits for the device without the backend's mutex; meanwhile its commits are
// being released: nothing may use them or commit over them, they still count, and they go
// back in use if the release is abandoned.
TEST_F(RangeLedgerTest, CommitsBeingReleasedCanBeNeitherUsedNorReplaced) {
  ASSERT_TRUE(commit(0, 2, 1).ok());
  ASSERT_TRUE(commit(2, 2, 2).ok());
  ASSERT_TRUE(commit(6, 2, 3).ok());
  ASSERT_TRUE(ledger.check_decommit(g(0, 4), kG).ok());
  ledger.begin_release(g(0, 4));

  EXPECT_TRUE(ledger.releasing_within(g(0, 16)));
  EXPECT_TRUE(ledger.releasing_within(g(2, 1))) << "the second commit starts in it";
  EXPECT_FALSE(ledger.releasing_within(g(1, 1))) << "no commit starts in it";
  EXPECT_FALSE(ledger.releasing_within(g(4, 12)));
  EXPECT_EQ(ledger.committed_bytes(), 6 * kG) << "the device still holds the memory";

  Status copy = ledger.check_committed({kBase + 2 * kG - 1, 2}, "copy_to_staging source");
  EXPECT_EQ(copy.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(copy.message(),
            "copy_to_staging source [0x7f00003fffff, +2 bytes): byte 0x7f00003fffff is being "
            "decommitted");
  EXPECT_EQ(ledger.check_committed(g(3, 1), "zero").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(ledger.check_committed(g(6, 2), "zero").ok()) << "another commit";
  EXPECT_EQ(ledger.check_decommit(g(0, 4), kG).message(),
            "decommit of [0x7f0000000000, +8388608 bytes): byte 0x7f0000000000 is being "
            "decommitted");
  EXPECT_EQ(ledger.check_decommit(g(2, 2), kG).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger.check_commit(g(1, 1), kG).code(), StatusCode::kFailedPrecondition)
      << "nothing is committed over memory not yet released";
  EXPECT_TRUE(ledger.check_decommit(g(6, 2), kG).ok()) << "another commit";
  EXPECT_TRUE(ledger.check_commit(g(4, 2), kG).ok()) << "uncommitted bytes in between";

  ledger.cancel_release(g(0, 4));
  EXPECT_FALSE(ledger.releasing_within(g(0, 16)));
  EXPECT_TRUE(ledger.check_committed(g(0, 4), "copy").ok()) << "back in use";
  EXPECT_TRUE(ledger.check_decommit(g(0, 4), kG).ok());

  ledger.begin_release(g(0, 4));
  EXPECT_EQ(ledger.take_commits(g(0, 4)), (std::vector<int>{1, 2}));
  EXPECT_FALSE(ledger.releasing_within(g(0, 16))) << "taken: nothing left to release";
  EXPECT_EQ(ledger.committed_bytes(), 2 * kG);
  EXPECT_TRUE(ledger.check_commit(g(0, 4), kG).ok());
}

TEST_F(RangeLedgerTest, MessagesNameTheCallTheRangeAndTheRule) {
  EXPECT_EQ(range_string({kBase, kG}), "[0x7f0000000000, +2097152 bytes)");
  auto message = [](const Status& status) { return status.message(); };
  EXPECT_EQ(message(ledger.check_commit({kBase, 0}, kG)),
            "commit of [0x7f0000000000, +0 bytes): the range is empty");
  EXPECT_EQ(message(ledger.check_commit({kBase, kG + 1}, kG)),
            "commit of [0x7f0000000000, +2097153 bytes): not aligned to the granularity "
            "(2097152 bytes)");
  EXPECT_EQ(message(ledger.check_commit(g(16, 1), kG)),
            "commit of [0x7f0002000000, +2097152 bytes): not inside one reservation");
  ASSERT_TRUE(commit(0, 2, 1).ok());
  EXPECT_EQ(message(ledger.check_commit(g(1, 1), kG)),
            "commit of [0x7f0000200000, +2097152 bytes): overlaps committed [0x7f0000000000, "
            "+4194304 bytes)");
  EXPECT_EQ(message(ledger.check_decommit(g(0, 1), kG)),
            "decommit of [0x7f0000000000, +2097152 bytes): would release only part of committed "
            "[0x7f0000000000, +4194304 bytes); decommit whole commits only");
  EXPECT_EQ(message(ledger.check_decommit(g(0, 3), kG)),
            "decommit of [0x7f0000000000, +6291456 bytes): byte 0x7f0000400000 is not committed");
  EXPECT_EQ(message(ledger.check_committed({kBase + 2 * kG - 1, 2}, "copy_to_staging source")),
            "copy_to_staging source [0x7f00003fffff, +2 bytes): byte 0x7f0000400000 is not "
            "committed");
}

}  // namespace
}  // namespace siesta
