// Where the offload benchmarks put their files, and the snapshot store they save into, so that
// every benchmark measures the same directory rules and the same store.
//
//   - bench_base_dir(): $SIESTA_BENCH_DIR, else /tmp. Point it at the disk you mean to
//     measure: on tmpfs fdatasync is free.
//   - bench_store_dir(): a private directory under it, one per benchmark.
//   - open_bench_store(): a fresh ProcessKey and a SnapshotStore in that directory named with
//     the key's nonce (file names and file headers then name the same process); the store
//     removes this process's files when it is destroyed.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/base/file_system.h"
#include "core/base/status.h"
#include "core/snapshot/chunk_sealer.h"
#include "core/snapshot/snapshot_store.h"

namespace siesta::bench {

// $SIESTA_BENCH_DIR when set and not empty, else "/tmp".
std::string bench_base_dir();

// `base`/`leaf`, created owner-only when possible. Errors are left for SnapshotStore::open to
// report, with the rule the directory breaks.
std::string bench_store_dir(const std::string& base, const std::string& leaf);

// Sets `key` to a fresh process key and `store` to a SnapshotStore opened in `dir` (which must
// exist or have an existing parent) with the real clock.
// Failure: the key's or the store's error; `key` and `store` are then unspecified.
Status open_bench_store(FileSystem& fs, const std::string& dir, std::optional<ProcessKey>& key,
                        std::unique_ptr<SnapshotStore>& store);

}  // namespace siesta::bench
