// On a machine without a CUDA driver (CI, the CPU machines) a binary that contains the CUDA
// backend still starts, the backend says why it cannot run, and create() fails cleanly with
// NotFound. Where a driver and a VMM-capable device are present, both say the opposite.
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "backends/cuda_vmm/cuda_vmm_backend.h"

namespace siesta {
namespace {

TEST(CudaDriverUnavailable, ReasonAndCreateAgree) {
  const std::string reason = CudaVmmBackend::unavailable_reason();
  Result<std::unique_ptr<CudaVmmBackend>> backend = CudaVmmBackend::create();
  if (reason.empty()) {
    std::cout << "CUDA is available here; checking that create() works\n";
    ASSERT_TRUE(backend.ok()) << backend.status().to_string();
    EXPECT_EQ((*backend)->name(), "cuda");
    EXPECT_GT((*backend)->granularity(), 0u);
    return;
  }
  std::cout << "CUDA is unavailable here: " << reason << "\n";
  ASSERT_FALSE(backend.ok());
  if (backend.status().code() == StatusCode::kUnsupported) {
    EXPECT_NE(reason.find("virtual memory management"), std::string::npos) << reason;
  } else {
    EXPECT_EQ(backend.status().code(), StatusCode::kNotFound) << backend.status().to_string();
  }
  EXPECT_EQ(backend.status().message(), reason) << "create() and unavailable_reason() agree";
}

TEST(CudaDriverUnavailable, AnswerIsStable) {
  EXPECT_EQ(CudaVmmBackend::unavailable_reason(), CudaVmmBackend::unavailable_reason());
}

TEST(CudaDriverUnavailable, MissingDeviceIsNotFound) {
  CudaVmmOptions options;
  options.device_ordinal = 4096;
  const std::string reason = CudaVmmBackend::unavailable_reason(options.device_ordinal);
  EXPECT_FALSE(reason.empty());
  Result<std::unique_ptr<CudaVmmBackend>> backend = CudaVmmBackend::create(options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), StatusCode::kNotFound) << backend.status().to_string();
}

TEST(CudaDriverUnavailable, BadOptionsAreInvalidArgumentBeforeTheDriver) {
  CudaVmmOptions options;
  options.staging_buffer_count = 0;
  Result<std::unique_ptr<CudaVmmBackend>> backend = CudaVmmBackend::create(options);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace siesta
