// What the RAM tier's tests share (tests/unit/offloader_spill_test.cc,
// offloader_ram_delta_test.cc): sessions of one length, tiers measured in copies of such a
// session, and the check that a session's snapshot is in exactly one place.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "core/offload/offloader.h"
#include "core/offload/ram_snapshot.h"
#include "tests/support/offloader_fixture.h"

namespace siesta::test_util {

inline constexpr uint32_t kSceneLength = 40;  // positions every session holds when it goes idle

// What one whole copy of a session of kSceneLength positions charges the tier: its block in
// whole pages, measured once on a session of its own (the every-step tests build a tier for
// each step).
inline uint64_t one_copy_bytes() {
  static const uint64_t bytes = [] {
    OffloaderFixture scratch;
    EXPECT_TRUE(scratch.command(kSceneLength).ok());
    const uint64_t block = ram_block_bytes(scratch.target_->snapshot_regions());
    constexpr uint64_t kPage = 4096;
    return (block + kPage - 1) / kPage * kPage;
  }();
  return bytes;
}

// A tier with room for `copies` such copies; `delta_segments` as OffloaderOptions' (0: every
// save whole).
inline OffloaderSetup tier_for(uint64_t copies, uint32_t delta_segments = 0) {
  OffloaderSetup setup;
  setup.ram_tier_bytes = copies * one_copy_bytes();
  setup.max_delta_segments = delta_segments;
  return setup;
}

// Whether segment `segment` of `session`'s snapshot is a file.
inline bool file_of(const OffloaderFixture& f, const std::string& session, uint32_t segment = 0) {
  return std::filesystem::exists(f.store_->snapshot_path(session, segment).value());
}

// Exactly one place holds the session's snapshot: RAM (a copy, no file) or disk (files, no
// copy); the status says the same. Resident, it may keep either as the base of its next delta,
// never both.
inline void expect_one_place(const OffloaderFixture& f, const Offloader& offloader,
                             const std::string& session) {
  const OffloadStatus st = offloader.status();
  SCOPED_TRACE("session " + session + " in state " + std::string(offload_state_name(st.state)));
  if (st.state == OffloadState::kRam) {
    EXPECT_GT(st.ram_bytes, 0u);
    EXPECT_EQ(st.disk_bytes, 0u);
    EXPECT_FALSE(file_of(f, session));
  } else if (st.state == OffloadState::kDisk) {
    EXPECT_EQ(st.ram_bytes, 0u);
    EXPECT_GT(st.disk_bytes, 0u);
    EXPECT_TRUE(file_of(f, session));
  } else {
    EXPECT_TRUE(st.ram_bytes == 0u || st.disk_bytes == 0u);
  }
}

}  // namespace siesta::test_util
