// Fuzz target: SnapshotReader over arbitrary file bytes. Whatever the bytes, read() returns a
// typed Status (never crashes, never reads outside the file, never allocates more than the
// file holds), and a file it accepts restored exactly the bytes its extents cover.
//
// The input is the whole file. To let mutations of valid files reach the chunks, the live
// session is taken from the file itself when its header decodes and describes at most 1 MiB:
// the expected mode, fingerprint, generation, owner and region table are the header's, so only the
// seals and the grammar decide. The key is the fixed test key the corpus was written with
// (tests/unit/snapshot_refusal_test.cc, SnapshotFuzzCorpus), and the clock stands at
// 1'800'000'000 as there.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/snapshot/snapshot_reader.h"
#include "tests/support/snapshot_test_util.h"

namespace {

using siesta::snapshot::SnapshotHeader;

const std::string& scratch_path() {
  static const std::string path = [] {
    const char* tmp = std::getenv("TMPDIR");
    return std::string(tmp != nullptr ? tmp : "/tmp") + "/siesta-snapshot-fuzz-" +
           std::to_string(::getpid()) + ".snap";
  }();
  static const bool cleanup_registered = [] {
    return std::atexit([] { ::unlink(scratch_path().c_str()); }) == 0;
  }();
  (void)cleanup_registered;
  return path;
}

// The session a file describes, when it is small enough to hold.
bool session_from(std::span<const uint8_t> data, SnapshotHeader& header) {
  auto prefix = siesta::snapshot::decode_prefix(
      data.first(std::min<size_t>(data.size(), siesta::snapshot::kPrefixBytes)));
  if (!prefix.ok() || prefix->header_bytes < siesta::snapshot::kTagBytes ||
      prefix->header_bytes > data.size()) {
    return false;
  }
  auto decoded = siesta::snapshot::decode_header_body(
      data.first(prefix->header_bytes - siesta::snapshot::kTagBytes));
  if (!decoded.ok()) return false;
  uint64_t total = 0;
  for (const auto& region : decoded->regions) {
    if (region.size > (1u << 20) || (total += region.size) > (1u << 20)) return false;
  }
  header = std::move(decoded).value();
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream out(scratch_path(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  static siesta::PosixFileSystem fs;
  static const siesta::ProcessKey key = siesta::snapshot_test::fixed_key(1);
  siesta::ManualClock clock;

  SnapshotHeader header;
  siesta::SnapshotReadOptions options;
  options.path = scratch_path();
  std::vector<std::vector<std::byte>> memory;
  std::vector<siesta::SnapshotRegion> regions;
  if (session_from({data, size}, header)) {
    options.mode = header.mode;
    options.fingerprint = header.fingerprint;
    options.generation = header.generation;
    options.owner = header.owner;
    for (const auto& layout : header.regions) {
      memory.emplace_back(layout.size);
      siesta::SnapshotRegion region;
      region.layout = layout;
      region.host = memory.back().data();
      regions.push_back(std::move(region));
    }
  }
  siesta::SnapshotReader reader(fs, clock, key, nullptr);
  auto read = reader.read(options, regions);
  // SIESTA_FUZZ_VERBOSE=1 prints each outcome (to see that the corpus reaches the chunks).
  static const bool verbose = std::getenv("SIESTA_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s\n", read.status().to_string().c_str());
  if (read.ok()) {
    uint64_t expected = 0;
    for (const auto& layout : read->header.regions) {
      for (const auto& extent : layout.extents) expected += extent.length;
    }
    if (read->payload_bytes != expected || read->file_bytes != size) std::abort();
  } else if (read.status().message().empty()) {
    std::abort();  // every refusal says why
  }
  // The header alone, as a restart reads a snapshot it may adopt: never passes a file whose
  // whole read was refused before its chunks, and when it passes, says the file's size.
  siesta::SnapshotHeaderCheck check;
  check.path = options.path;
  check.mode = options.mode;
  check.fingerprint = options.fingerprint;
  auto header_only = reader.read_header(check);
  if (header_only.ok()) {
    if (header_only->file_bytes != size || header_only->payload_bytes != 0) std::abort();
    if (read.ok() && header_only->header.generation != read->header.generation) std::abort();
  } else if (header_only.status().message().empty() || read.ok()) {
    std::abort();  // every refusal says why; a file read whole has a header that passes
  }
  // As a restart's adoption reads it (any writer under the key): what passes with the nonce
  // checked passes without it, and names the same save.
  check.any_process = true;
  auto adoptable = reader.read_header(check);
  if (header_only.ok() &&
      (!adoptable.ok() || adoptable->header.generation != header_only->header.generation)) {
    std::abort();
  }
  if (!adoptable.ok() && adoptable.status().message().empty()) std::abort();
  return 0;
}
