// The memory backends a benchmark can run on in this build: the simulator always, CUDA where
// the build has it and a device is present (otherwise the reason is printed once).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "core/memory/memory_backend.h"
#ifdef SIESTA_WITH_CUDA
#include "backends/cuda_vmm/cuda_vmm_backend.h"
#endif

namespace siesta::bench {

// What a benchmark may set; zero keeps the backend's default.
struct BenchBackendOptions {
  size_t max_chunk_bytes = 0;
  size_t staging_buffer_bytes = 0;
  size_t staging_buffer_count = 0;
  uint64_t sim_capacity_bytes = 0;
};

using BackendFactory =
    std::function<Result<std::unique_ptr<MemoryBackend>>(const BenchBackendOptions&)>;

struct BenchBackend {
  std::string name;  // "sim", "cuda"
  BackendFactory make;
};

template <class Options>
void apply_common(const BenchBackendOptions& from, Options& to) {
  if (from.max_chunk_bytes != 0) to.max_chunk_bytes = from.max_chunk_bytes;
  if (from.staging_buffer_bytes != 0) to.staging_buffer_bytes = from.staging_buffer_bytes;
  if (from.staging_buffer_count != 0) to.staging_buffer_count = from.staging_buffer_count;
}

template <class Backend, class Options>
Result<std::unique_ptr<MemoryBackend>> make_backend(Options options) {
  auto backend = Backend::create(std::move(options));
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<MemoryBackend>(std::move(backend).value());
}

// Whether this build has CUDA and a device with virtual memory management is present; when
// not, says why on stderr, naming the benchmark `who`.
inline bool cuda_available(const char* who) {
#ifdef SIESTA_WITH_CUDA
  const std::string reason = CudaVmmBackend::unavailable_reason();
  if (reason.empty()) return true;
  std::fprintf(stderr, "%s: skipping cuda: %s\n", who, reason.c_str());
#else
  std::fprintf(stderr, "%s: built without CUDA; no cuda runs\n", who);
#endif
  return false;
}

// `who` names the benchmark in the line printed when CUDA is skipped.
inline std::vector<BenchBackend> available_backends(const char* who) {
  std::vector<BenchBackend> out;
  out.push_back({"sim", [](const BenchBackendOptions& o) {
                   SimBackendOptions options;
                   apply_common(o, options);
                   // Hazards catch missing synchronisation in tests; benchmarks measure the
                   // path (no poisoning of fresh memory, copies overlapping the disk).
                   options.hazards = SimHazards::none();
                   if (o.sim_capacity_bytes != 0) options.capacity_bytes = o.sim_capacity_bytes;
                   return make_backend<SimBackend>(std::move(options));
                 }});
#ifdef SIESTA_WITH_CUDA
  if (cuda_available(who)) {
    out.push_back({"cuda", [](const BenchBackendOptions& o) {
                     CudaVmmOptions options;
                     apply_common(o, options);
                     return make_backend<CudaVmmBackend>(std::move(options));
                   }});
  }
#else
  cuda_available(who);  // says why
#endif
  return out;
}

}  // namespace siesta::bench
