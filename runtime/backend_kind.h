// BackendKind: which device a stack runs on: the simulator, CUDA, or CUDA where it is usable,
// with the names front ends spell them by ("sim", "cuda", "auto").
//
// Thread rule: none (constexpr functions).
#pragma once

#include <optional>
#include <string_view>

namespace siesta::runtime {

enum class BackendKind {
  kSim,   // the host simulator (backends/sim): deterministic, runs everywhere
  kCuda,  // the CUDA driver VMM (backends/cuda_vmm); an error where no GPU is usable
  kAuto,  // CUDA when a usable device is present, else the simulator (saying why)
};

// "sim", "cuda", "auto".
constexpr std::string_view backend_kind_name(BackendKind kind) {
  switch (kind) {
    case BackendKind::kSim: return "sim";
    case BackendKind::kCuda: return "cuda";
    case BackendKind::kAuto: return "auto";
  }
  return "unknown";
}

// The kind `name` spells (exactly, lower case), or nullopt.
constexpr std::optional<BackendKind> parse_backend_kind(std::string_view name) {
  for (BackendKind kind : {BackendKind::kSim, BackendKind::kCuda, BackendKind::kAuto}) {
    if (name == backend_kind_name(kind)) return kind;
  }
  return std::nullopt;
}

}  // namespace siesta::runtime
