// Where the offload benchmarks put their files, so that every benchmark measures the same
// directory rules (the key and the store they save into are the runtime's OffloadStorage).
//
//   - bench_base_dir(): $SIESTA_BENCH_DIR, else /tmp. Point it at the disk you mean to
//     measure: on tmpfs fdatasync is free.
//   - bench_store_dir(): a private directory under it, one per benchmark.
#pragma once

#include <string>

namespace siesta::bench {

// $SIESTA_BENCH_DIR when set and not empty, else "/tmp".
std::string bench_base_dir();

// `base`/`leaf`, created owner-only when possible. Errors are left for SnapshotStore::open to
// report, with the rule the directory breaks.
std::string bench_store_dir(const std::string& base, const std::string& leaf);

}  // namespace siesta::bench
