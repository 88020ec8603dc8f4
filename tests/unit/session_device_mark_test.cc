// The mark a Session leaves at each command's end (mark_device_work(): a kernels fence) and what
// a save waits on (wait_for_marked_work()), on the simulator with synthetic:tiny, whose work
// stream runs a job only once something waits for it or for a later one: a fence that fails
// leaves no older mark to be waited on in its place.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <memory>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "compute/kernels_wrapper.h"
#include "core/memory/host_vmm.h"
#include "engine/model.h"
#include "engine/session.h"
#include "tests/support/engine_test_util.h"

namespace siesta::engine {
namespace {

using namespace ::siesta::engine::test_util;  // NOLINT(google-build-using-namespace)

// A Kernels whose fence() fails while `refuse_fences` is set: the injected fault.
class FenceRefusingKernels final : public KernelsWrapper {
 public:
  using KernelsWrapper::KernelsWrapper;
  Result<std::unique_ptr<KernelFence>> fence() override {
    if (refuse_fences) return DeviceError("injected: the kernels refuse a fence");
    return KernelsWrapper::fence();
  }
  bool refuse_fences = false;
};

// Guards: a command's end whose fence fails keeping the mark of an earlier command, so that the
// next save waits for that old mark alone and copies the memory while the later work still
// runs (or, on the strict simulator, has not run). With no fence the session must say it
// keeps no mark: the Offloader then synchronizes the whole device.
TEST(SessionDeviceMarkTest, AFailedFenceLeavesNoMarkForTheNextSaveToWaitOn) {
  SimBackendOptions options;
  options.granularity = 64u << 10;
  options.max_chunk_bytes = 16u << 20;
  SIESTA_ASSERT_OK_AND_ASSIGN(auto backend, SimBackend::create(options));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto host_kernels, HostKernels::create(*backend));
  FenceRefusingKernels kernels(*host_kernels);
  HostVmm host;
  SIESTA_ASSERT_OK_AND_ASSIGN(auto model, Model::load(tiny(KvType::kF32), *backend, kernels));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto session, Session::create(*model, *backend, kernels, host));
  SIESTA_ASSERT_OK_AND_ASSIGN(bool marked, session->wait_for_marked_work());
  EXPECT_FALSE(marked) << "no command has ended: there is no mark";

  SIESTA_ASSERT_OK(prefill(*session, "the first command"));
  session->mark_device_work();  // its end: a fence
  // The next command's device work, queued after that mark (a job on the simulator's work
  // stream, which runs only once something waits for it or for a later ticket)...
  std::atomic<bool> later_work_ran{false};
  ASSERT_TRUE(backend
                  ->enqueue_work([&later_work_ran] {
                    later_work_ran = true;
                    return Status::Ok();
                  })
                  .ok());
  // ...and that command's end, whose fence fails.
  kernels.refuse_fences = true;
  std::printf("fault: the kernels refuse the fence at the second command's end\n");
  session->mark_device_work();
  kernels.refuse_fences = false;
  SIESTA_ASSERT_OK_AND_ASSIGN(marked, session->wait_for_marked_work());
  if (marked) {
    EXPECT_TRUE(later_work_ran) << "the save waited for a mark from before the last command";
  }
  EXPECT_FALSE(marked) << "a failed fence left the earlier mark in place";

  // A fence that works marks everything before it again.
  session->mark_device_work();
  SIESTA_ASSERT_OK_AND_ASSIGN(marked, session->wait_for_marked_work());
  EXPECT_TRUE(marked);
  EXPECT_TRUE(later_work_ran);
}

}  // namespace
}  // namespace siesta::engine
