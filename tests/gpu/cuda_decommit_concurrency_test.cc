// A decommit waits for all device work (cuCtxSynchronize) without the backend's mutex: while it
// waits, another range's commit completes, and copies of the range being decommitted are
// refused rather than enqueued between the synchronisation and the unmap. The device work is a
// host function on a stream of the test's own that blocks until the test lets it go, so the
// decommit's wait lasts as long as the test needs. Every wait is bounded, so a regression
// fails here rather than hanging. Skips, printing why, where CUDA is unavailable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "tests/support/backend_test_util.h"

namespace siesta {
namespace {

constexpr auto kBound = std::chrono::seconds(30);

// What the blocking host function shares with the test.
struct Gate {
  std::promise<void> entered;
  std::latch open{1};
};

void CUDART_CB hold_until_opened(void* data) {
  auto* gate = static_cast<Gate*>(data);
  gate->entered.set_value();
  gate->open.wait();
}

class CudaDecommitConcurrencyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = CudaVmmBackend::unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

TEST_F(CudaDecommitConcurrencyTest, ADecommitWaitingForTheDeviceStallsNoOtherRange) {
  auto created = CudaVmmBackend::create({});
  SIESTA_ASSERT_OK(created.status());
  std::unique_ptr<CudaVmmBackend> backend = std::move(created).value();
  const size_t g = backend->granularity();
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange draining, ReservedRange::reserve(*backend, 2 * g));
  SIESTA_ASSERT_OK_AND_ASSIGN(ReservedRange other, ReservedRange::reserve(*backend, 2 * g));
  SIESTA_ASSERT_OK(backend->commit(draining.range()));
  SIESTA_ASSERT_OK_AND_ASSIGN(StagingBuffer buffer, backend->acquire_staging());
  const size_t copy_bytes = std::min(g, backend->staging_buffer_bytes());

  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);  // the primary context, as the backend's
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  Gate gate;
  std::future<void> entered = gate.entered.get_future();
  ASSERT_EQ(cudaLaunchHostFunc(stream, hold_until_opened, &gate), cudaSuccess);
  bool opened = false;
  auto open = [&] {
    if (!std::exchange(opened, true)) gate.open.count_down();
  };

  Status decommitted = Internal("decommit did not return");
  std::thread decommitter;
  if (entered.wait_for(kBound) != std::future_status::ready) {
    ADD_FAILURE() << "the blocking host function never ran";
  } else {
    decommitter = std::thread([&] { decommitted = backend->decommit(draining.range()); });
    // The decommit marks its range before it synchronises: from then on a copy of the range is
    // refused. Until then a copy is enqueued (and the decommit will wait for it too). Each
    // probe runs on a thread of its own, so one that blocks on the backend's mutex is reported.
    bool marked = false;
    bool blocked = false;
    const auto deadline = std::chrono::steady_clock::now() + kBound;
    while (!marked && !blocked && std::chrono::steady_clock::now() < deadline) {
      auto probe = std::async(std::launch::async, [&] {
        return backend->copy_to_staging(draining.range().base, copy_bytes, buffer).status();
      });
      if (probe.wait_for(kBound) != std::future_status::ready) {
        blocked = true;
        ADD_FAILURE() << "a copy waited for the decommit's synchronisation";
        open();  // before the probe's destructor waits for it
      } else {
        Status copy = probe.get();
        marked = copy.code() == StatusCode::kFailedPrecondition &&
                 copy.message().find("is being decommitted") != std::string::npos;
        if (!copy.ok() && !marked) ADD_FAILURE() << "unexpected: " << copy.to_string();
        std::this_thread::yield();
      }
    }
    if (!marked && !blocked) ADD_FAILURE() << "the decommit never marked its range";
    if (marked) {
      auto commit = std::async(std::launch::async, [&] { return backend->commit(other.range()); });
      if (commit.wait_for(kBound) != std::future_status::ready) {
        ADD_FAILURE() << "commit of another range waited for the decommit's synchronisation";
        open();
      } else {
        SIESTA_EXPECT_OK(commit.get());
      }
      EXPECT_FALSE(opened) << "the device work was let go before the commit returned";
    }
  }
  open();
  if (decommitter.joinable()) decommitter.join();
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  SIESTA_EXPECT_OK(decommitted);
  EXPECT_EQ(backend->stats().committed_bytes, 2 * g) << "only the other range stays committed";
}

}  // namespace
}  // namespace siesta
