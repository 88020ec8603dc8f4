// The main() of a benchmark program whose entries depend on the environment (sizes, chunk
// sizes, backends read from SIESTA_BENCH_*): Google Benchmark's flags first, then the entries
// registered by `register_entries`, then the run, as BENCHMARK_MAIN() would.
#pragma once

#include <benchmark/benchmark.h>

namespace siesta::bench {

inline int run_registered(int argc, char** argv, void (*register_entries)()) {
  benchmark::Initialize(&argc, argv);
  register_entries();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace siesta::bench
