// A snapshot read back by a later process under the same key (a restart with the same key
// file): the file names its writer's nonce, which the reader accepts only when told to
// (SnapshotReadOptions::process_nonce), and SnapshotReader::read_header authenticates the
// header alone -- owner, generation, expiry, size -- without reading a chunk, refusing another
// key, another fingerprint, an expired, truncated or lengthened file as read() does.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "tests/support/snapshot_file_fixture.h"

namespace siesta {
namespace {

// The same key bytes as snapshot_test::fixed_key(1), another nonce: the process after a restart.
ProcessKey restarted_key() {
  const ProcessKey before = snapshot_test::fixed_key(1);
  snapshot::ProcessNonce nonce{};
  nonce.fill(0xa5);
  return ProcessKey::from_bytes(before.key_bytes(), nonce);
}

class SnapshotAdoptionReadTest : public snapshot_test::SnapshotFileFixture {
 protected:
  SnapshotHeaderCheck header_check() const {
    SnapshotHeaderCheck check;
    check.path = path();
    check.mode = mode();
    check.fingerprint = snapshot_test::fingerprint(9);
    check.process_nonce = key_.nonce();  // the writer's
    return check;
  }
};

TEST_P(SnapshotAdoptionReadTest, ALaterProcessReadsItWhenToldTheWritersNonce) {
  SnapshotWriteOptions write = write_options();
  write.owner = "7";
  write.generation = mode() == snapshot::SnapshotMode::kDurableExport ? 0 : 41;
  auto saved = sample(3);
  SnapshotWriter writer(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(const SnapshotWriteResult written, writer.write(write, views(saved)));

  const ProcessKey later = restarted_key();
  SnapshotReader reader(fs_, clock_, later, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(const SnapshotReadResult header, reader.read_header(header_check()));
  EXPECT_EQ(header.file_bytes, written.file_bytes);
  EXPECT_EQ(header.file_bytes, std::filesystem::file_size(path()));
  EXPECT_EQ(header.payload_bytes, 0u) << "no chunk was read";
  EXPECT_EQ(header.header.owner, "7");
  EXPECT_EQ(header.header.generation, write.generation);
  EXPECT_EQ(header.header.expiry_unix, write.expiry_unix);

  auto restored = sample(0);
  SnapshotReadOptions read = read_options();
  read.owner = "7";
  read.generation = write.generation;
  if (mode() != snapshot::SnapshotMode::kDurableExport) {
    // another process's file, unless told whose
    SIESTA_EXPECT_CODE(reader.read(read, views(restored)), StatusCode::kForeign);
    SnapshotHeaderCheck own = header_check();
    own.process_nonce.reset();
    SIESTA_EXPECT_CODE(reader.read_header(own), StatusCode::kForeign);
  }
  read.process_nonce = key_.nonce();
  SIESTA_ASSERT_OK(reader.read(read, views(restored)).status());
  for (size_t r = 0; r < saved.size(); ++r) {
    if (saved[r].region.layout.persist != snapshot::PersistKind::kContents) continue;
    for (const snapshot::Extent& e : saved[r].region.layout.extents) {
      EXPECT_EQ(0, std::memcmp(saved[r].bytes.data() + e.offset,
                               restored[r].bytes.data() + e.offset, e.length))
          << "region " << r;
    }
  }
}

TEST_P(SnapshotAdoptionReadTest, TheHeaderAloneIsRefusedAsReadRefusesIt) {
  SIESTA_ASSERT_OK(write_sample(1).status());
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SnapshotHeaderCheck check = header_check();
  check.fingerprint[0] ^= 1;
  // another fingerprint
  SIESTA_EXPECT_CODE(reader.read_header(check), StatusCode::kForeign);

  clock_.advance(std::chrono::seconds(100));  // the sample expires 100 s after its write
  SIESTA_EXPECT_CODE(reader.read_header(header_check()), StatusCode::kExpired);
  check = header_check();
  check.check_expiry = false;
  // an older segment's expiry
  SIESTA_EXPECT_OK(reader.read_header(check).status());

  const uint64_t size = std::filesystem::file_size(path());
  { std::ofstream(path(), std::ios::app | std::ios::binary) << 'x'; }
  // a byte after the trailer
  SIESTA_EXPECT_CODE(reader.read_header(check), StatusCode::kCorrupt);
  std::filesystem::resize_file(path(), size - 1);
  SIESTA_EXPECT_CODE(reader.read_header(check), StatusCode::kTruncated);
}

TEST_P(SnapshotAdoptionReadTest, AnotherKeyIsRefusedWhenTheFileIsSealedWithOne) {
  SIESTA_ASSERT_OK(write_sample(1).status());
  // The writer's nonce claimed, another key: the header's seal does not verify under it.
  const ProcessKey other = snapshot_test::fixed_key(2);
  SnapshotReader reader(fs_, clock_, other, nullptr);
  if (mode() == snapshot::SnapshotMode::kSessionEncrypted) {
    SIESTA_EXPECT_CODE(reader.read_header(header_check()), StatusCode::kCorrupt);
  } else {
    // A digest seal names no key: nothing but the encrypted mode proves who wrote a file,
    // which is why only that mode's snapshots may be kept across a restart.
    SIESTA_EXPECT_OK(reader.read_header(header_check()).status());
  }
}

TEST_P(SnapshotAdoptionReadTest, AHeaderThatPassesSaysNothingOfTheChunks) {
  SIESTA_ASSERT_OK(write_sample(1).status());
  const uint64_t size = std::filesystem::file_size(path());
  {  // a byte in the middle of the chunks, not the header's nor the trailer's
    std::fstream f(path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(static_cast<std::streamoff>(size / 2));
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SIESTA_EXPECT_OK(reader.read_header(header_check()).status());
  SIESTA_EXPECT_CODE(read_sample(key_), StatusCode::kCorrupt);
}

TEST_P(SnapshotAdoptionReadTest, TheRouteComesBackAndIsNeverInTheFileInClearWhenEncrypted) {
  const std::string said = "what the user said to the model";
  SnapshotWriteOptions write = write_options();
  write.route.assign(said.begin(), said.end());
  auto saved = sample(3);
  SIESTA_ASSERT_OK(SnapshotWriter(fs_, clock_, key_, nullptr).write(write, views(saved)).status());
  const std::vector<uint8_t> bytes = snapshot_test::read_file(path());
  const bool in_clear =
      std::search(bytes.begin(), bytes.end(), said.begin(), said.end()) != bytes.end();
  EXPECT_EQ(in_clear, mode() != snapshot::SnapshotMode::kSessionEncrypted)
      << "encrypted under the file key in AES mode; a digest mode keeps nothing secret";
  SnapshotReader reader(fs_, clock_, key_, nullptr);
  SIESTA_ASSERT_OK_AND_ASSIGN(const SnapshotReadResult header, reader.read_header(header_check()));
  EXPECT_EQ(std::string(header.header.route.begin(), header.header.route.end()), said);
}

INSTANTIATE_TEST_SUITE_P(Modes, SnapshotAdoptionReadTest, snapshot_test::kEveryMode,
                         snapshot_test::mode_test_name);

}  // namespace
}  // namespace siesta
