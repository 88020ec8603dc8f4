// Totals over several sessions, made in one place (OffloadCounters::operator+=, add_totals):
// no counter left out, every size summed (snapshot_segments included: a hand-written sum once
// forgot it), flags ORed, the shown state and times kept.
#include <gtest/gtest.h>

#include <cstring>
#include <type_traits>

#include "core/offload/offloader.h"

namespace siesta {
namespace {

// Every field of OffloadCounters is an 8-byte count or double: filled byte by byte with 1s, a
// counters struct is a distinct non-zero value in every field, and adding it to zeroes must
// give it back bit for bit. A field the operator forgets stays zero and the bytes differ.
TEST(OffloadTotalsTest, AddingCountersLeavesNoFieldOut) {
  static_assert(std::is_trivially_copyable_v<OffloadCounters>);
  static_assert(sizeof(OffloadCounters) % 8 == 0, "only 8-byte fields: no padding to compare");
  OffloadCounters more;
  std::memset(static_cast<void*>(&more), 0x01, sizeof more);  // trivially copyable: fine
  OffloadCounters total{};
  total += more;
  EXPECT_EQ(std::memcmp(&total, &more, sizeof total), 0) << "a counter was not added";
  total += more;
  EXPECT_EQ(total.saves, 2 * more.saves);
  EXPECT_EQ(total.save_seconds.count, 2 * more.save_seconds.count);
  EXPECT_EQ(total.restore_seconds.cumulative[3], 2 * more.restore_seconds.cumulative[3]);
}

TEST(OffloadTotalsTest, StatusTotalsSumSizesAndKeepTheShownStateAndTimes) {
  OffloadStatus shown;
  shown.state = OffloadState::kResident;
  shown.operation_ms = 7;
  shown.disk_bytes = 100;
  shown.snapshot_segments = 2;
  shown.released_vram_bytes = 10;
  shown.tokens = 5;
  shown.counters.saves = 1;
  OffloadStatus other;
  other.state = OffloadState::kDisk;
  other.operation_ms = 99;
  other.disk_bytes = 50;
  other.snapshot_segments = 3;
  other.released_vram_bytes = 20;
  other.released_host_bytes = 4;
  other.tokens = 6;
  other.counters.saves = 2;
  other.memory_lost = true;
  other.last_error = "from the other";
  add_totals(shown, other);
  EXPECT_EQ(shown.state, OffloadState::kResident);
  EXPECT_EQ(shown.operation_ms, 7);
  EXPECT_EQ(shown.disk_bytes, 150u);
  EXPECT_EQ(shown.snapshot_segments, 5u);
  EXPECT_EQ(shown.released_vram_bytes, 30u);
  EXPECT_EQ(shown.released_host_bytes, 4u);
  EXPECT_EQ(shown.tokens, 11u);
  EXPECT_EQ(shown.counters.saves, 3u);
  EXPECT_TRUE(shown.memory_lost);
  EXPECT_EQ(shown.last_error, "from the other") << "the shown one had none";
  shown.last_error = "mine";
  add_totals(shown, other);
  EXPECT_EQ(shown.last_error, "mine");
}

}  // namespace
}  // namespace siesta
