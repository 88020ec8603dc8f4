#include "backends/sim/host_kernel_loops.h"

#include <cstdlib>
#include <cstring>

#include "backends/sim/host_kernel_loops_impl.h"

namespace siesta {

#if !defined(SIESTA_HOST_LOOPS_AVX2)
const HostLoops* host_loops_avx2() { return nullptr; }
#endif

const HostLoops& host_loops_baseline() {
  static const HostLoops kBaseline = {&host_loops_impl::dot8_tile<4>, &host_loops_impl::attend<4>,
                                      "sse"};
  return kBaseline;
}

const HostLoops& host_loops() {
  static const HostLoops& chosen = []() -> const HostLoops& {
    const char* forced = std::getenv("SIESTA_HOST_LOOPS");
    if (forced != nullptr && std::strcmp(forced, "sse") == 0) return host_loops_baseline();
    const HostLoops* wide = host_loops_avx2();
    return wide != nullptr ? *wide : host_loops_baseline();
  }();
  return chosen;
}

}  // namespace siesta
