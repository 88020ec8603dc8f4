// Model: weights are the same on every load, have a reservation of their own, and nothing
// stays reserved when a load fails (a bad config, no memory, a failing upload or wait).
#include "engine/model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "core/memory/device_copy.h"
#include "engine/session_layout.h"
#include "tests/support/call_failing_kernels.h"
#include "tests/support/engine_test_util.h"

namespace siesta::engine {
namespace {

using namespace ::siesta::engine::test_util;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

TEST(Model, WeightsAreTheSameOnEveryLoad) {
  Rig a, b;
  SIESTA_ASSERT_OK(a.init(tiny(KvType::kF32)));
  SIESTA_ASSERT_OK(b.init(tiny(KvType::kInt8)));
  const DeviceRange ra = a.model->weight_range(), rb = b.model->weight_range();
  ASSERT_EQ(ra.size, rb.size);
  EXPECT_GE(ra.size, a.model->config().weight_bytes());
  SIESTA_ASSERT_OK_AND_ASSIGN(auto wa,
                              siesta::test_util::read_device(*a.backend, ra.base, ra.size));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto wb,
                              siesta::test_util::read_device(*b.backend, rb.base, rb.size));
  EXPECT_EQ(siesta::test_util::first_difference(wa, wb), -1);
  // Tensors do not repeat each other: the embedding and the output matrix differ.
  EXPECT_NE(a.model->embedding(), a.model->output());
  EXPECT_FALSE(ra.contains({a.session->device_memory().at(0).base, 1}))
      << "weights have a reservation of their own";
}

TEST(Model, AnInvalidConfigReservesNothing) {
  SIESTA_ASSERT_OK_AND_ASSIGN(auto backend, SimBackend::create());
  SIESTA_ASSERT_OK_AND_ASSIGN(auto kernels, HostKernels::create(*backend));
  ModelConfig c = tiny(KvType::kF32);
  c.heads = 3;
  SIESTA_EXPECT_CODE(Model::load(c, *backend, *kernels), StatusCode::kInvalidArgument);
  EXPECT_EQ(backend->stats().reserved_bytes, 0u);
}

TEST(Model, OutOfMemoryReleasesTheReservation) {
  SimBackendOptions options;
  options.granularity = 64u << 10;
  options.capacity_bytes = 256u << 10;  // less than tiny's ~0.5 MB of weights
  SIESTA_ASSERT_OK_AND_ASSIGN(auto backend, SimBackend::create(options));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto kernels, HostKernels::create(*backend));
  SIESTA_EXPECT_CODE(Model::load(tiny(KvType::kF32), *backend, *kernels), StatusCode::kOutOfMemory);
  EXPECT_EQ(backend->stats().reserved_bytes, 0u);
  EXPECT_EQ(backend->stats().committed_bytes, 0u);
}

// The weights go up in pieces, then the load waits for them: a failure of any of those calls
// is the load's error, and the weights' memory is given back.
TEST(Model, AFailedUploadOrWaitReleasesTheWeights) {
  SIESTA_ASSERT_OK_AND_ASSIGN(auto backend, SimBackend::create());
  SIESTA_ASSERT_OK_AND_ASSIGN(auto host_kernels, HostKernels::create(*backend));
  siesta::testing::CallFailingKernels kernels(*host_kernels);
  SIESTA_ASSERT_OK(Model::load(tiny(KvType::kF32), *backend, kernels).status());
  const uint64_t calls = kernels.calls();  // one upload per tensor, then synchronize()
  ASSERT_GT(calls, 20u);
  for (uint64_t n : {uint64_t{1}, calls / 2, calls}) {
    SCOPED_TRACE("kernels call " + std::to_string(n) + " of " + std::to_string(calls));
    kernels.arm(n);
    Result<std::unique_ptr<Model>> loaded = Model::load(tiny(KvType::kF32), *backend, kernels);
    ASSERT_NE(kernels.fired(), nullptr);
    EXPECT_EQ(kernels.fired(), std::string(n == calls ? "synchronize" : "upload"));
    SIESTA_EXPECT_CODE(loaded, StatusCode::kDeviceError);
    EXPECT_THAT(loaded.status().message(), HasSubstr("injected"));
    EXPECT_EQ(backend->stats().reserved_bytes, 0u);
    EXPECT_EQ(backend->stats().committed_bytes, 0u);
  }
}

}  // namespace
}  // namespace siesta::engine
