// On a machine without a GPU or CUDA driver (CI, the CPU machines) a binary that contains
// CudaKernels still starts (the CUDA runtime is linked statically and loads libcuda only
// when called), and CudaKernels::create() fails cleanly with Unsupported and a message that
// says why. Where a GPU is present the first test skips, saying so; the others run anywhere.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <string>

#include "backends/cuda_vmm/cuda_kernels.h"
#include "backends/cuda_vmm/cuda_vmm_backend.h"

namespace siesta {
namespace {

TEST(CudaKernelsUnavailable, CreateFailsCleanlyWithoutAGpu) {
  const std::string reason = CudaVmmBackend::unavailable_reason();
  if (reason.empty()) GTEST_SKIP() << "a CUDA device is present: tests/gpu covers create()";
  std::cout << "CUDA is unavailable here: " << reason << "\n";
  Result<std::unique_ptr<Kernels>> kernels = CudaKernels::create();
  ASSERT_FALSE(kernels.ok());
  std::cout << "CudaKernels::create(): " << kernels.status().to_string() << "\n";
  EXPECT_EQ(kernels.status().code(), StatusCode::kUnsupported) << kernels.status().to_string();
  EXPECT_NE(kernels.status().message().find("CUDA kernels unavailable"), std::string::npos)
      << kernels.status().message();
  // Asking again gives the same answer (nothing half-initialised is left behind).
  Result<std::unique_ptr<Kernels>> again = CudaKernels::create();
  EXPECT_EQ(again.status(), kernels.status());
}

TEST(CudaKernelsUnavailable, MissingDeviceIsUnsupported) {
  Result<std::unique_ptr<Kernels>> kernels = CudaKernels::create(4096);
  ASSERT_FALSE(kernels.ok());
  EXPECT_EQ(kernels.status().code(), StatusCode::kUnsupported) << kernels.status().to_string();
}

TEST(CudaKernelsUnavailable, NegativeOrdinalIsInvalidArgument) {
  Result<std::unique_ptr<Kernels>> kernels = CudaKernels::create(-1);
  ASSERT_FALSE(kernels.ok());
  EXPECT_EQ(kernels.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace siesta
