// The MemoryBackend conformance suites on the simulator, bare and behind a FaultyBackend whose
// plan never fires (the wrapper must be transparent).
#include "testing/faulty_backend.h"
#include "tests/support/backend_conformance.h"
#include "tests/support/backend_copy_conformance.h"
#include "tests/support/backend_host_copy_conformance.h"
#include "tests/support/sim_backend_under_test.h"

namespace siesta::conformance {
namespace {

struct SimTraits {
  static BackendUnderTest make() { return make_sim_under_test(); }
};

struct FaultyOverSimTraits {
  static BackendUnderTest make() {
    const FaultPlan never = FaultPlan::none();
    return make_sim_under_test(&never);
  }
};

using SimTypes = ::testing::Types<SimTraits>;
INSTANTIATE_TYPED_TEST_SUITE_P(Sim, BackendConformance, SimTypes);
INSTANTIATE_TYPED_TEST_SUITE_P(SimCopies, BackendCopyConformance, SimTypes);
INSTANTIATE_TYPED_TEST_SUITE_P(SimHostCopies, BackendHostCopyConformance, SimTypes);

using FaultyOverSimTypes = ::testing::Types<FaultyOverSimTraits>;
INSTANTIATE_TYPED_TEST_SUITE_P(FaultyOverSim, BackendConformance, FaultyOverSimTypes);
INSTANTIATE_TYPED_TEST_SUITE_P(FaultyOverSimCopies, BackendCopyConformance, FaultyOverSimTypes);
INSTANTIATE_TYPED_TEST_SUITE_P(FaultyOverSimHostCopies, BackendHostCopyConformance,
                               FaultyOverSimTypes);

}  // namespace
}  // namespace siesta::conformance
