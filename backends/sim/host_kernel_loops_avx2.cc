// The host loops at eight lanes, compiled for AVX2 (and F16C, for the f16 KV rows) through a
// target attribute on each of their functions (host_simd.h says why not through a flag for the
// file). No FMA: the additions and multiplications are the baseline's, lane for lane, so the
// bits are too.
#define SIESTA_SIMD_TARGET __attribute__((target("avx2,f16c")))
#define SIESTA_SIMD_F16C 1
#include <cpuid.h>

#include "backends/sim/host_kernel_loops_impl.h"

namespace siesta {
namespace {

// CPUID leaf 1, ECX bit 29 (Clang's __builtin_cpu_supports has no "f16c"). F16C is only
// reported with AVX, whose OS support __builtin_cpu_supports("avx2") checks.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
}

}  // namespace

const HostLoops* host_loops_avx2() {
  static const HostLoops kAvx2 = {&host_loops_impl::dot8_tile<8>, &host_loops_impl::attend<8>,
                                  "avx2"};
  static const bool usable = __builtin_cpu_supports("avx2") && has_f16c();
  return usable ? &kAvx2 : nullptr;
}

}  // namespace siesta
