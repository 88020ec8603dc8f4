#include "backends/sim/host_kernel_loops.h"

#include "backends/sim/host_kernel_loops_impl.h"

namespace siesta {

const HostLoops& host_loops() {
  static const HostLoops kBaseline = {&host_loops_impl::dot8_tile<4>, &host_loops_impl::attend<4>,
                                      "sse"};
  return kBaseline;
}

}  // namespace siesta
