// The snapshot writer, reader, store and exporter when an OpenSSL call fails under them
// (through the interposed OpenSSL of tests/support/openssl_call_faults.cc; no working library
// fails them): the file id, the temporary's name, a sealer, the header's seal or digest, a
// chunk's seal, the trailer's seal; on reading, a sealer, the header digest, a chunk's
// opening; a store's nonce and an exporter's key. Each is Internal with OpenSSL's step in the
// message, a write leaves nothing behind in its directory (no snapshot, no temporary), and a
// store or exporter that cannot be made holds no files. Each case says what it injects.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_export.h"
#include "core/snapshot/snapshot_reader.h"
#include "core/snapshot/snapshot_store.h"
#include "core/snapshot/snapshot_writer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/call_faults.h"
#include "tests/support/snapshot_test_util.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using snapshot_test::HostRegion;
using test_util::CallFault;
using test_util::counting;
using test_util::ScopedCallFault;
using ::testing::HasSubstr;

struct StepFault {
  CallFault fault;
  const char* says = "";
};

class SnapshotOpensslFaultTest : public ::testing::Test {
 protected:
  SnapshotOpensslFaultTest() {
    regions_.push_back(snapshot_test::host_region("kv", 3000, {{0, 3000}}, 11));
    regions_.push_back(snapshot_test::host_region("ckpt", 500, {{0, 500}}, 12));
    for (const HostRegion& r : regions_) views_.push_back(r.region);
  }

  SnapshotWriteOptions write_options() const {
    SnapshotWriteOptions o;
    o.path = dir_.file("s.snap");
    o.fingerprint = snapshot_test::fingerprint(4);
    o.expiry_unix = clock_.unix_seconds() + 100;
    o.generation = 1;
    o.chunk_bytes = 1000;  // four chunks
    o.threads = 1;         // one worker: its seals, and so their calls, come in chunk order
    return o;
  }
  Result<SnapshotWriteResult> write() {
    SnapshotWriter writer(fs_, clock_, key_, nullptr);
    return writer.write(write_options(), views_);
  }
  Status read() {
    std::vector<HostRegion> into;
    std::vector<SnapshotRegion> views;
    into.reserve(regions_.size());
    views.reserve(regions_.size());
    for (const HostRegion& r : regions_) {
      into.push_back(snapshot_test::host_region(r.region.layout.name, r.region.layout.size,
                                                r.region.layout.extents, 0));
    }
    for (const HostRegion& r : into) views.push_back(r.region);
    SnapshotReadOptions o{dir_.file("s.snap"), snapshot::SnapshotMode::kSessionEncrypted,
                          snapshot_test::fingerprint(4)};
    o.generation = 1;
    o.threads = 2;
    SnapshotReader reader(fs_, clock_, key_, nullptr);
    return reader.read(o, views).status();
  }

  siesta::testing::TempDir dir_;
  PosixFileSystem fs_;
  ManualClock clock_;
  ProcessKey key_ = snapshot_test::fixed_key(5);
  std::vector<HostRegion> regions_;
  std::vector<SnapshotRegion> views_;
};

// Guards: a write that goes on without a random file id or temporary name, a sealer or a
// header digest (a file no reader could verify), or leaves its temporary behind.
TEST_F(SnapshotOpensslFaultTest, AWriteWhoseOpensslCallFailsIsInternalAndLeavesNothing) {
  const StepFault cases[] = {
      {{.function = "RAND_bytes"}, "OpenSSL RAND_bytes failed"},                 // the file id
      {{.function = "RAND_bytes", .nth_call = 2}, "OpenSSL RAND_bytes failed"},  // the temporary
      {{.function = "HMAC"}, "HMAC-SHA256 file key derivation failed"},          // header sealer
      {{.function = "EVP_EncryptUpdate"}, "AES-GCM aad failed"},                 // header seal
      {{.function = "EVP_Digest"}, "SHA-256 failed"},                            // header digest
      {{.function = "HMAC", .nth_call = 2}, "HMAC-SHA256 file key derivation failed"},  // chunks'
      {{.function = "EVP_EncryptUpdate", .nth_call = 2}, "AES-GCM aad failed"},      // first chunk
      {{.function = "EVP_EncryptUpdate", .nth_call = 5}, "AES-GCM encrypt failed"},  // a later one
  };
  for (const StepFault& c : cases) {
    SCOPED_TRACE(c.fault.describe());
    {
      ScopedCallFault armed(c.fault);
      const Result<SnapshotWriteResult> written = write();
      EXPECT_EQ(written.status().code(), StatusCode::kInternal);
      EXPECT_THAT(written.status().message(), HasSubstr(c.says));
      EXPECT_EQ(armed.fired(), 1u);
    }
    EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u) << "no snapshot, no temporary";
  }
  SIESTA_EXPECT_OK(write().status());  // the writer itself is unharmed
}

// The trailer is sealed last, after every chunk is on disk: its failure still removes the
// temporary. The call to fail is the last EVP_EncryptUpdate a clean write makes.
TEST_F(SnapshotOpensslFaultTest, AWriteWhoseTrailerSealFailsLeavesNothing) {
  uint64_t updates = 0;
  {
    ScopedCallFault counted(counting("EVP_EncryptUpdate"));
    SIESTA_ASSERT_OK(write().status());
    updates = counted.calls();
  }
  ASSERT_TRUE(fs_.remove(dir_.file("s.snap")).ok());
  const CallFault fault{.function = "EVP_EncryptUpdate", .nth_call = updates};
  SCOPED_TRACE(fault.describe() + " (the trailer's)");
  ScopedCallFault armed(fault);
  const Result<SnapshotWriteResult> written = write();
  EXPECT_EQ(written.status().code(), StatusCode::kInternal);
  EXPECT_THAT(written.status().message(), HasSubstr("AES-GCM aad failed"));
  EXPECT_EQ(armed.fired(), 1u);
  EXPECT_EQ(snapshot_test::count_files(dir_.path()), 0u);
}

// Guards: a read that restores chunks it could not verify (no sealer, no header digest to
// bind them to, an opening that failed) or reports that as the file's fault.
TEST_F(SnapshotOpensslFaultTest, AReadWhoseOpensslCallFailsIsInternalNotTheFilesFault) {
  SIESTA_ASSERT_OK(write().status());
  const StepFault cases[] = {
      {{.function = "HMAC"}, "HMAC-SHA256 file key derivation failed"},                 // header
      {{.function = "EVP_Digest"}, "SHA-256 failed"},                                   // digest
      {{.function = "HMAC", .nth_call = 2}, "HMAC-SHA256 file key derivation failed"},  // chunks'
      {{.function = "EVP_DecryptInit_ex", .nth_call = 2}, "AES-GCM init failed"},       // a chunk
  };
  for (const StepFault& c : cases) {
    SCOPED_TRACE(c.fault.describe());
    ScopedCallFault armed(c.fault);
    const Status status = read();
    EXPECT_EQ(status.code(), StatusCode::kInternal);
    EXPECT_THAT(status.message(), HasSubstr(c.says));
    EXPECT_EQ(armed.fired(), 1u);
  }
  SIESTA_EXPECT_OK(read());  // the file itself is sound
}

// Guards: a store opened with a nonce the generator did not make (every store would share
// it, and take each other's files for its own), holding a lock file nonetheless.
TEST_F(SnapshotOpensslFaultTest, AStoreWithoutARandomNonceIsNotOpened) {
  const CallFault fault{.function = "RAND_bytes"};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const std::string dir = dir_.file("store");
  const Result<std::unique_ptr<SnapshotStore>> store =
      SnapshotStore::open(fs_, clock_, dir, SnapshotStore::Options{});
  EXPECT_EQ(store.status().code(), StatusCode::kInternal);
  EXPECT_THAT(store.status().message(), HasSubstr("RAND_bytes could not make a process nonce"));
  EXPECT_EQ(snapshot_test::count_files(dir), 0u) << "no lock file";
}

TEST_F(SnapshotOpensslFaultTest, AnExporterWithoutARandomKeyIsNotOpened) {
  const CallFault fault{.function = "RAND_bytes"};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<std::unique_ptr<SnapshotExporter>> exporter = SnapshotExporter::open(
      fs_, clock_, nullptr, dir_.file("exports"), SnapshotExporter::Options{});
  EXPECT_EQ(exporter.status().code(), StatusCode::kInternal);
  EXPECT_THAT(exporter.status().message(), HasSubstr("RAND_bytes failed"));
}

}  // namespace
}  // namespace siesta
