// Properties of snapshot files, over arbitrary region sets (none, empty regions, unaligned
// sizes, many small extents), every mode and chunk sizes down to one byte:
//   - what is written reads back, extent for extent, and nothing else is touched;
//   - any single changed byte anywhere in the file is refused;
//   - every truncation is Truncated;
//   - swapped, reordered or replayed (from another file) chunks are Corrupt;
//   - a file of another process key is Foreign (session modes);
//   - a file of another generation than the one expected (a replayed older save) is Foreign,
//     and one of the expected generation reads (session modes);
//   - a file is Expired at, and only at, its deadline.
// Writes and reads take their record buffers from one shared pool, stale bytes and all.
//
// Case count and seed: at least 500 cases per property unless RC_PARAMS names max_success;
// the seed and count are printed before each property, e.g.
//   RC_PARAMS="seed=12345 max_success=2000" ./snapshot_property_test
// On failure RapidCheck prints the shrunk case and a reproduce string for RC_PARAMS.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "core/base/clock.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot::Extent;
using snapshot::SnapshotMode;
using snapshot_test::HostRegion;

constexpr int kMinCases = 500;

// Runs `property` with the configured parameters, raised to kMinCases unless RC_PARAMS sets
// max_success, printing the seed first so that any run can be repeated.
template <class Property>
void check_property(Property&& property) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  const char* env = std::getenv("RC_PARAMS");
  if (env == nullptr || std::string(env).find("max_success") == std::string::npos) {
    params.maxSuccess = std::max(params.maxSuccess, kMinCases);
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::cout << "rapidcheck: " << info->name() << " seed=" << params.seed
            << " max_success=" << params.maxSuccess << " max_size=" << params.maxSize << std::endl;
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(info->test_suite_name()) + "/" + info->name();
  metadata.description = info->name();
  const auto result = rc::detail::checkTestable(std::forward<Property>(property), metadata, params);
  if (!result.template is<rc::detail::SuccessResult>()) {
    std::ostringstream message;
    rc::detail::printResultMessage(result, message);
    FAIL() << message.str() << "\n(seed=" << params.seed << ")";
  }
}

// A region set as generated: per region a size and its extents.
struct Layout {
  std::vector<std::pair<uint64_t, std::vector<Extent>>> regions;
  uint32_t chunk_bytes = 1;
  SnapshotMode mode = SnapshotMode::kSessionEncrypted;
};

// Extents are built from (gap, length) pairs, so they are sorted and disjoint by
// construction, then clipped to the region's size.
rc::Gen<std::pair<uint64_t, std::vector<Extent>>> region_gen() {
  return rc::gen::mapcat(rc::gen::inRange<uint64_t>(0, 3000), [](uint64_t size) {
    return rc::gen::map(
        rc::gen::container<std::vector<std::pair<uint32_t, uint32_t>>>(
            rc::gen::pair(rc::gen::inRange<uint32_t>(0, 300), rc::gen::inRange<uint32_t>(1, 400))),
        [size](const std::vector<std::pair<uint32_t, uint32_t>>& cuts) {
          std::vector<Extent> extents;
          uint64_t at = 0;
          for (const auto& [gap, length] : cuts) {
            at += gap;
            if (at >= size) break;
            const uint64_t len = std::min<uint64_t>(length, size - at);
            extents.push_back({at, len});
            at += len;
          }
          return std::make_pair(size, extents);
        });
  });
}

rc::Gen<Layout> layout_gen() {
  return rc::gen::map(
      rc::gen::tuple(
          rc::gen::resize(6,
                          rc::gen::container<std::vector<std::pair<uint64_t, std::vector<Extent>>>>(
                              region_gen())),
          rc::gen::inRange<uint32_t>(1, 700),
          rc::gen::element(SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest,
                           SnapshotMode::kDurableExport)),
      [](const auto& t) {
        Layout l;
        std::tie(l.regions, l.chunk_bytes, l.mode) = t;
        return l;
      });
}

// Every case's writes share one pool of record buffers, as an Offloader's saves do: a buffer
// comes back holding another case's bytes, of another size, and must change nothing.
RecordBufferPool& shared_record_buffers() {
  static RecordBufferPool pool;
  return pool;
}

// One file written from a layout, and the means to read it back.
class SnapshotWorld {
 public:
  explicit SnapshotWorld(const Layout& layout, uint64_t seed = 1) : layout_(layout) {
    for (size_t r = 0; r < layout.regions.size(); ++r) {
      const auto& [size, extents] = layout.regions[r];
      sources_.push_back(
          snapshot_test::host_region("r" + std::to_string(r), size, extents, seed * 1000 + r));
    }
  }
  std::string path() const { return dir_.file("p.snap"); }
  std::vector<SnapshotRegion> views(std::vector<HostRegion>& regions) const {
    std::vector<SnapshotRegion> out;
    out.reserve(regions.size());
    for (auto& h : regions) out.push_back(h.region);
    return out;
  }
  Result<SnapshotWriteResult> write(const ProcessKey& with, const std::string& to) {
    SnapshotWriteOptions o;
    o.generation = generation;
    o.path = to;
    o.mode = layout_.mode;
    o.fingerprint = snapshot_test::fingerprint(4);
    o.expiry_unix = clock.unix_seconds() + ttl;
    o.chunk_bytes = layout_.chunk_bytes;
    o.record_buffers = &shared_record_buffers();
    SnapshotWriter writer(fs_, clock, with, nullptr);
    return writer.write(o, views(sources_));
  }
  Result<SnapshotWriteResult> write() { return write(key, path()); }
  // Reads into zeroed regions; `restored` receives them.
  Status read(const ProcessKey& with, std::vector<HostRegion>* restored = nullptr) {
    std::vector<HostRegion> dest = sources_;
    for (auto& h : dest) {
      std::fill(h.bytes.begin(), h.bytes.end(), std::byte{0});
      h.region.host = h.bytes.data();
    }
    SnapshotReader reader(fs_, clock, with, nullptr);
    SnapshotReadOptions options{path(), layout_.mode, snapshot_test::fingerprint(4)};
    options.generation = expected_generation;
    Status s = reader.read(options, views(dest)).status();
    if (restored != nullptr) *restored = std::move(dest);
    return s;
  }
  Status read() { return read(key); }
  const std::vector<HostRegion>& sources() const { return sources_; }

  ManualClock clock;
  int64_t ttl = 1000;
  uint64_t generation = 0;           // written
  uint64_t expected_generation = 0;  // what a read expects
  ProcessKey key = snapshot_test::fixed_key(1);
  testing::TempDir dir_;

 private:
  Layout layout_;
  snapshot_test::TestFileSystem fs_{UINT64_MAX, /*skip_syncs=*/true};
  std::vector<HostRegion> sources_;
};

TEST(SnapshotPropertyTest, RoundTripRestoresExactlyTheExtents) {
  check_property([] {
    const Layout layout = *layout_gen();
    SnapshotWorld world(layout);
    RC_ASSERT(world.write().ok());
    std::vector<HostRegion> restored;
    const Status read = world.read(world.key, &restored);
    RC_ASSERT(read.ok());
    for (size_t r = 0; r < restored.size(); ++r) {
      std::vector<std::byte> expected(restored[r].bytes.size(), std::byte{0});
      for (const Extent& e : layout.regions[r].second) {
        std::memcpy(expected.data() + e.offset, world.sources()[r].bytes.data() + e.offset,
                    e.length);
      }
      RC_ASSERT(restored[r].bytes == expected);
    }
  });
}

// The typed reason a reader gives for one changed byte, from the documented grammar
// (docs/SNAPSHOT_FORMAT.md, "What the reader checks, in order"): the version is Unsupported,
// a session file's process nonce and a flags value turned into the other session mode are Foreign,
// a header length may send the reader past the end (Truncated) or out of bounds (Corrupt), and
// every other byte -- seals checked before the fingerprint and layout -- is Corrupt. The
// offsets are the grammar's, written out here on purpose: the test checks the format as
// documented, not as the code happens to compute it.
std::vector<StatusCode> expected_codes_for_flip(SnapshotMode mode, size_t at, uint8_t mask) {
  constexpr size_t kVersionAt = 8, kFlagsAt = 12, kHeaderBytesAt = 16, kNonceAt = 36;
  if (at >= kVersionAt && at < kVersionAt + 4) return {StatusCode::kUnsupported};
  if (at >= kFlagsAt && at < kFlagsAt + 4) {
    // The other session mode is Foreign (a mode the reader did not expect); a durable export
    // must carry an all-zero nonce and a session file must not, so a flip between an export
    // and a session mode, like any invalid value, is Corrupt (the header's grammar).
    const uint32_t flags = snapshot::flags_for(mode) ^ (uint32_t{mask} << (8 * (at - kFlagsAt)));
    const bool other_session_mode =
        mode != SnapshotMode::kDurableExport && (flags == 0 || flags == 1);
    return {other_session_mode ? StatusCode::kForeign : StatusCode::kCorrupt};
  }
  if (at >= kHeaderBytesAt && at < kHeaderBytesAt + 4) {
    return {StatusCode::kCorrupt, StatusCode::kTruncated};
  }
  if (at >= kNonceAt && at < kNonceAt + 16 && mode != SnapshotMode::kDurableExport) {
    return {StatusCode::kForeign};
  }
  return {StatusCode::kCorrupt};
}

TEST(SnapshotPropertyTest, AnyChangedByteIsRefusedForItsTypedReason) {
  check_property([] {
    const Layout layout = *layout_gen();
    SnapshotWorld world(layout);
    RC_ASSERT(world.write().ok());
    auto bytes = snapshot_test::read_file(world.path());
    const size_t at = *rc::gen::inRange<size_t>(0, bytes.size());
    const auto mask = static_cast<uint8_t>(*rc::gen::inRange<int>(1, 256));
    bytes[at] ^= mask;
    snapshot_test::write_file(world.path(), bytes);
    const Status read = world.read();
    RC_TAG(std::string(status_code_name(read.code())));
    const std::vector<StatusCode> want = expected_codes_for_flip(layout.mode, at, mask);
    RC_ASSERT(std::find(want.begin(), want.end(), read.code()) != want.end());
  });
}

TEST(SnapshotPropertyTest, EveryTruncationIsTruncated) {
  check_property([] {
    SnapshotWorld world(*layout_gen());
    RC_ASSERT(world.write().ok());
    auto bytes = snapshot_test::read_file(world.path());
    bytes.resize(*rc::gen::inRange<size_t>(0, bytes.size()));
    snapshot_test::write_file(world.path(), bytes);
    RC_ASSERT(world.read().code() == StatusCode::kTruncated);
  });
}

// Whole records (chunk header, payload, tag) moved, with the file size unchanged: a swap of two
// equal-sized chunks, a rotation of several, or a chunk copied from another file of the same
// layout, process and position.
TEST(SnapshotPropertyTest, MovedOrReplayedChunksAreCorrupt) {
  check_property([] {
    Layout layout;
    layout.mode = *rc::gen::element(SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest,
                                    SnapshotMode::kDurableExport);
    layout.chunk_bytes = *rc::gen::inRange<uint32_t>(1, 64);
    const auto chunks_per_region = *rc::gen::container<std::vector<uint32_t>>(
        *rc::gen::inRange<size_t>(1, 4), rc::gen::inRange<uint32_t>(1, 6));
    for (uint32_t n : chunks_per_region) {
      const uint64_t size = uint64_t{n} * layout.chunk_bytes;
      layout.regions.push_back({size, {{0, size}}});
    }
    SnapshotWorld world(layout, 1);
    RC_ASSERT(world.write().ok());
    const auto original = snapshot_test::read_file(world.path());
    const size_t record = snapshot::chunk_record_layout(layout.chunk_bytes).size;
    size_t count = 0;
    for (uint32_t n : chunks_per_region) count += n;
    const size_t header = original.size() - snapshot::kTrailerBytes - count * record;
    RC_PRE(count >= 2);
    auto bytes = original;
    const int how = *rc::gen::inRange(0, 3);
    const size_t i = *rc::gen::inRange<size_t>(0, count);
    const size_t j = (i + 1 + *rc::gen::inRange<size_t>(0, count - 1)) % count;  // j != i
    auto rec = [&](std::vector<uint8_t>& b, size_t k) { return b.begin() + header + k * record; };
    if (how == 0) {
      std::swap_ranges(rec(bytes, i), rec(bytes, i) + record, rec(bytes, j));
    } else if (how == 1) {
      const size_t lo = std::min(i, j), hi = std::max(i, j) + 1;
      std::rotate(rec(bytes, lo), rec(bytes, lo) + record, rec(bytes, hi));
    } else {
      SnapshotWorld other(layout, 2);  // other bytes, same layout, same process
      RC_ASSERT(other.write(world.key, other.path()).ok());
      auto foreign = snapshot_test::read_file(other.path());
      RC_ASSERT(foreign.size() == bytes.size());
      std::copy(rec(foreign, i), rec(foreign, i) + record, rec(bytes, i));
    }
    RC_PRE(bytes != original);  // chunks of equal bytes (digest mode) swap to the same file
    snapshot_test::write_file(world.path(), bytes);
    RC_ASSERT(world.read().code() == StatusCode::kCorrupt);
  });
}

TEST(SnapshotPropertyTest, AnotherProcessKeyIsForeign) {
  check_property([] {
    Layout layout = *layout_gen();
    layout.mode = *rc::gen::element(SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest);
    SnapshotWorld world(layout);
    RC_ASSERT(world.write().ok());
    const auto other_seed = *rc::gen::inRange<int>(2, 250);
    RC_ASSERT(world.read(snapshot_test::fixed_key(static_cast<uint8_t>(other_seed))).code() ==
              StatusCode::kForeign);
  });
}

// A key with this process's nonce but other key bytes -- what a forger who learned the nonce
// (it is in the file names) would hold: under AES-GCM the header's seal fails (Corrupt); digest
// seals are keyless, so there the nonce is the whole binding and the file reads.
TEST(SnapshotPropertyTest, SameNonceAnotherKeyIsCorruptUnderAesGcmOnly) {
  check_property([] {
    Layout layout = *layout_gen();
    layout.mode = *rc::gen::element(SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest);
    SnapshotWorld world(layout);
    RC_ASSERT(world.write().ok());
    ProcessKey::KeyBytes other{};
    const auto salt = static_cast<uint8_t>(*rc::gen::inRange<int>(1, 256));
    for (size_t i = 0; i < other.size(); ++i) other[i] = static_cast<uint8_t>(salt + 13 * i);
    const ProcessKey impostor = ProcessKey::from_bytes(other, world.key.nonce());
    const Status read = world.read(impostor);
    if (layout.mode == SnapshotMode::kSessionEncrypted) {
      RC_ASSERT(read.code() == StatusCode::kCorrupt);
    } else {
      RC_ASSERT(read.ok());
    }
  });
}

TEST(SnapshotPropertyTest, AnotherGenerationIsForeign) {
  check_property([] {
    Layout layout = *layout_gen();
    layout.mode = *rc::gen::element(SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest);
    SnapshotWorld world(layout);
    world.generation = *rc::gen::inRange<uint64_t>(0, 1000);
    RC_ASSERT(world.write().ok());
    world.expected_generation = world.generation;
    RC_ASSERT(world.read().ok());
    world.expected_generation =
        *rc::gen::distinctFrom(rc::gen::arbitrary<uint64_t>(), world.generation);
    RC_ASSERT(world.read().code() == StatusCode::kForeign);
  });
}

TEST(SnapshotPropertyTest, ExpiredAtAndOnlyAtTheDeadline) {
  check_property([] {
    SnapshotWorld world(*layout_gen());
    world.ttl = *rc::gen::inRange<int64_t>(0, 5000);
    RC_ASSERT(world.write().ok());
    const int64_t waited = *rc::gen::inRange<int64_t>(0, 10000);
    world.clock.advance(std::chrono::seconds(waited));
    const Status read = world.read();
    if (waited < world.ttl) {
      RC_ASSERT(read.ok());
    } else {
      RC_ASSERT(read.code() == StatusCode::kExpired);
    }
  });
}

// Exhaustive over one file: every byte position flipped, every truncation length.
TEST(SnapshotExhaustiveTest, EveryByteAndEveryLength) {
  for (SnapshotMode mode : {SnapshotMode::kSessionEncrypted, SnapshotMode::kSessionDigest,
                            SnapshotMode::kDurableExport}) {
    Layout layout;
    layout.mode = mode;
    layout.chunk_bytes = 7;
    layout.regions = {{40, {{0, 3}, {10, 20}}}, {0, {}}, {9, {{8, 1}}}};
    SnapshotWorld world(layout);
    ASSERT_TRUE(world.write().ok());
    const auto good = snapshot_test::read_file(world.path());
    for (size_t at = 0; at < good.size(); ++at) {
      auto bytes = good;
      bytes[at] ^= 0x01;
      snapshot_test::write_file(world.path(), bytes);
      const StatusCode code = world.read().code();
      const std::vector<StatusCode> want = expected_codes_for_flip(mode, at, 0x01);
      EXPECT_NE(std::find(want.begin(), want.end(), code), want.end())
          << "flip at " << at << " gave " << status_code_name(code);
    }
    // The prefix (magic, version, flags, header length) with every possible change of a byte.
    for (size_t at = 0; at < snapshot::kPrefixBytes; ++at) {
      for (int mask = 1; mask < 256; ++mask) {
        auto bytes = good;
        bytes[at] ^= static_cast<uint8_t>(mask);
        snapshot_test::write_file(world.path(), bytes);
        const StatusCode code = world.read().code();
        const std::vector<StatusCode> want =
            expected_codes_for_flip(mode, at, static_cast<uint8_t>(mask));
        ASSERT_NE(std::find(want.begin(), want.end(), code), want.end())
            << "byte " << at << " ^ " << mask << " gave " << status_code_name(code);
      }
    }
    for (size_t length = 0; length < good.size(); ++length) {
      snapshot_test::write_file(world.path(), {good.begin(), good.begin() + length});
      EXPECT_EQ(world.read().code(), StatusCode::kTruncated) << "length " << length;
    }
    snapshot_test::write_file(world.path(), good);
    EXPECT_TRUE(world.read().ok());
  }
}

}  // namespace
}  // namespace siesta
