// The fixture of the snapshot file tests (snapshot_round_trip_test.cc,
// snapshot_refusal_test.cc, snapshot_write_protocol_test.cc): a temporary directory, the
// real file system, a ManualClock, a fixed process key, and a sample of two host regions (one
// sparse) and a reinit region, written and read in the mode the test is instantiated with.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta::snapshot_test {

class SnapshotFileFixture : public ::testing::TestWithParam<snapshot::SnapshotMode> {
 protected:
  snapshot::SnapshotMode mode() const { return GetParam(); }
  std::string path() const { return dir_.file("s.snap"); }

  SnapshotWriteOptions write_options() const {
    SnapshotWriteOptions o;
    o.path = path();
    o.mode = mode();
    o.fingerprint = snapshot_test::fingerprint(9);
    o.expiry_unix = clock_.unix_seconds() + 100;
    o.chunk_bytes = 1000;  // small: many chunks, odd boundaries
    return o;
  }
  SnapshotReadOptions read_options() const {
    return {path(), mode(), snapshot_test::fingerprint(9)};
  }

  // Two host regions (one sparse) and a reinit region, written with `key_`.
  std::vector<HostRegion> sample(uint64_t seed) const {
    std::vector<HostRegion> r;
    r.push_back(host_region("kv", 5000, {{0, 1}, {10, 2500}, {4000, 1000}}, seed));
    r.push_back(host_region("ckpt", 777, {{0, 777}}, seed + 1));
    r.push_back(host_region("rope", 128, {}, seed + 2, snapshot::PersistKind::kReinit));
    return r;
  }
  static std::vector<SnapshotRegion> views(const std::vector<HostRegion>& r) {
    std::vector<SnapshotRegion> out;
    out.reserve(r.size());
    for (const auto& h : r) out.push_back(h.region);
    return out;
  }
  Result<SnapshotWriteResult> write_sample(uint64_t seed) {
    auto regions = sample(seed);
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    return writer.write(write_options(), views(regions));
  }
  // Reads into fresh zeroed regions shaped like sample().
  Status read_sample(const ProcessKey& key) {
    auto regions = sample(0);
    for (auto& h : regions) std::memset(h.bytes.data(), 0, h.bytes.size());
    SnapshotReader reader(fs_, clock_, key, nullptr);
    return reader.read(read_options(), views(regions)).status();
  }

  testing::TempDir dir_;
  PosixFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(1);
};

// Every mode, named "session_encrypted", "session_digest", "durable_export".
inline const auto kEveryMode = ::testing::Values(snapshot::SnapshotMode::kSessionEncrypted,
                                                 snapshot::SnapshotMode::kSessionDigest,
                                                 snapshot::SnapshotMode::kDurableExport);
inline std::string mode_test_name(
    const ::testing::TestParamInfo<snapshot::SnapshotMode>& param_info) {
  std::string name(snapshot::snapshot_mode_name(param_info.param));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

}  // namespace siesta::snapshot_test
