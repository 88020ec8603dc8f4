// The host loops at eight lanes, compiled for AVX2 (and F16C, for the f16 KV rows) through a
// target attribute on each of their functions (host_simd.h says why not through a flag for the
// file). No FMA: the additions and multiplications are the baseline's, lane for lane, so the
// bits are too.
#define SIESTA_SIMD_TARGET __attribute__((target("avx2,f16c")))
#define SIESTA_SIMD_F16C 1
#include "backends/sim/host_kernel_loops_impl.h"

namespace siesta {

const HostLoops* host_loops_avx2() {
  static const HostLoops kAvx2 = {&host_loops_impl::dot8_tile<8>, &host_loops_impl::attend<8>,
                                  "avx2"};
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") ? &kAvx2 : nullptr;
}

}  // namespace siesta
