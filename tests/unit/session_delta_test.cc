// A delta save of a Session (snapshot_regions_after(n) over the regions saved at n tokens),
// on the simulator with synthetic:tiny for every KV type: a restore from the base and the delta,
// by hand, gives back every byte the session would save whole, whatever the unchanged prefix,
// and a prompt diverging after it rolls back onto the restored checkpoints.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/memory/device_copy.h"
#include "engine/session.h"
#include "tests/support/engine_test_util.h"

namespace siesta::engine {
namespace {

using namespace ::siesta::engine::test_util;  // NOLINT(google-build-using-namespace)

using SessionDeltaTest = TinySessionTest;

// The bytes of `regions`' extents as the memory holds them now, one entry per extent.
using SavedExtents = std::vector<std::pair<SnapshotRegion, std::vector<std::byte>>>;
void save_extents(Rig& rig, const std::vector<SnapshotRegion>& regions, SavedExtents& saved) {
  SIESTA_ASSERT_OK(rig.kernels->synchronize());
  for (const SnapshotRegion& r : regions) {
    for (const Extent& e : r.layout.extents) {
      std::vector<std::byte> bytes(e.length);
      if (r.place == SnapshotRegion::Place::kDevice) {
        SIESTA_ASSERT_OK(copy_device_to_host(*rig.backend, r.device + e.offset, bytes));
      } else {
        std::memcpy(bytes.data(), r.host + e.offset, e.length);
      }
      SnapshotRegion one = r;
      one.layout.extents = {e};
      saved.emplace_back(one, std::move(bytes));
    }
  }
}

// A restore from segments, by hand: the memory released and committed again at the same
// addresses (fresh memory: nothing of the old bytes), each segment's extents copied back
// oldest first, then adopted.
void restore_segments(Rig& rig, const std::vector<const SavedExtents*>& segments) {
  Session& session = *rig.session;
  SIESTA_ASSERT_OK(rig.kernels->synchronize());
  const std::vector<DeviceRange> device = session.device_memory();
  for (DeviceRange range : device) SIESTA_ASSERT_OK(rig.backend->decommit(range));
  for (HostRange* host : session.host_memory()) SIESTA_ASSERT_OK(host->release());
  for (DeviceRange range : device) SIESTA_ASSERT_OK(rig.backend->commit(range));
  for (HostRange* host : session.host_memory()) SIESTA_ASSERT_OK(host->commit());
  for (const SavedExtents* segment : segments) {
    for (const auto& [r, bytes] : *segment) {
      const uint64_t offset = r.layout.extents[0].offset;
      if (r.place == SnapshotRegion::Place::kDevice) {
        SIESTA_ASSERT_OK(copy_host_to_device(*rig.backend, bytes, r.device + offset));
      } else {
        std::memcpy(r.host + offset, bytes.data(), bytes.size());
      }
    }
  }
  SIESTA_ASSERT_OK(session.adopt_restored_state());
}

// Guards: a delta's checkpoint extent that starts inside the first checkpoint taken since the
// unchanged prefix (its byte offset scaled from the token count) instead of at that
// checkpoint's start. When the unchanged prefix is not a multiple of the checkpoint interval
// (16 here), the base holds none of that checkpoint and the delta only its tail: a restore from
// base + delta leaves the rest as fresh memory left it, and a prompt that diverges just after
// it rolls back onto a broken recurrent state. Checked for prefixes on and off the interval.
TEST_P(SessionDeltaTest, ADeltaHoldsTheFirstChangedCheckpointWhole) {
  const std::string edited = std::string(kPrompt.substr(0, 40)) + " again";  // rolls back to 32
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer full, fresh_answer(config_, edited, 8));
  for (uint32_t unchanged : {20u, 31u, 32u, 5u}) {
    SCOPED_TRACE("unchanged prefix of " + std::to_string(unchanged) + " tokens");
    Rig rig;
    SIESTA_ASSERT_OK(rig.init(config_));
    Session& session = *rig.session;
    SIESTA_ASSERT_OK(prefill(session, kPrompt.substr(0, unchanged)));
    (void)session.take_unchanged_tokens();  // the save of the base: counted from here
    SavedExtents base;
    ASSERT_NO_FATAL_FAILURE(save_extents(rig, session.snapshot_regions(), base));
    SIESTA_ASSERT_OK(prefill(session, kPrompt));  // the next turn: 69 tokens
    ASSERT_EQ(session.take_unchanged_tokens(), unchanged);
    SavedExtents delta;
    ASSERT_NO_FATAL_FAILURE(save_extents(rig, session.snapshot_regions_after(unchanged), delta));
    SavedExtents whole;
    ASSERT_NO_FATAL_FAILURE(save_extents(rig, session.snapshot_regions(), whole));

    ASSERT_NO_FATAL_FAILURE(restore_segments(rig, {&base, &delta}));
    SavedExtents restored;
    ASSERT_NO_FATAL_FAILURE(save_extents(rig, session.snapshot_regions(), restored));
    ASSERT_EQ(restored.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_TRUE(restored[i].second == whole[i].second)
          << whole[i].first.layout.name << ": base + delta restore other bytes than were saved";
    }
    SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session, edited));
    EXPECT_EQ(reused, 32u);
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(session, 8));
    EXPECT_EQ(after, full) << "'" << after.text << "' vs '" << full.text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(EveryKvType, SessionDeltaTest,
                         ::testing::Values(KvType::kF32, KvType::kF16, KvType::kInt8),
                         [](const auto& p) { return std::string(kv_type_name(p.param)); });

}  // namespace
}  // namespace siesta::engine
