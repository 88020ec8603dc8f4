// The driver table and the CUresult mapping, checked without a GPU: the toolkit's stub
// libcuda.so exports every ABI name a real driver does, so resolving the whole table
// against it proves that each (versioned) symbol name exists, and its cuInit answers
// CUDA_ERROR_STUB_LIBRARY, which must read as "no driver".
//
// This binary never calls cuda::driver(): the stub's soname is libcuda.so.1, so once it is
// loaded a later dlopen("libcuda.so.1") in the same process would get the stub back.
#include "backends/cuda_vmm/cuda_driver_api.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <string>

namespace siesta::cuda {
namespace {

TEST(CudaStatusCode, MapsTheCodesCallersBranchOn) {
  EXPECT_EQ(status_code_from_cu(CUDA_SUCCESS), StatusCode::kOk);
  EXPECT_EQ(status_code_from_cu(CUDA_ERROR_OUT_OF_MEMORY), StatusCode::kOutOfMemory);
  EXPECT_EQ(status_code_from_cu(CUDA_ERROR_NO_DEVICE), StatusCode::kNotFound);
  EXPECT_EQ(status_code_from_cu(CUDA_ERROR_STUB_LIBRARY), StatusCode::kNotFound);
  EXPECT_EQ(status_code_from_cu(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH), StatusCode::kNotFound);
  EXPECT_EQ(status_code_from_cu(CUDA_ERROR_NOT_SUPPORTED), StatusCode::kUnsupported);
  EXPECT_EQ(status_code_from_cu(CUDA_ERROR_ILLEGAL_ADDRESS), StatusCode::kDeviceError);
  EXPECT_EQ(status_code_from_cu(CUDA_ERROR_INVALID_VALUE), StatusCode::kDeviceError);
}

TEST(CudaDriverLibrary, MissingLibraryIsNotFound) {
  auto library = DriverLibrary::open("libsiesta-no-such-driver.so.1");
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), StatusCode::kNotFound);
  EXPECT_NE(library.status().message().find("libsiesta-no-such-driver.so.1"), std::string::npos);
}

TEST(CudaDriverLibrary, LibraryWithoutTheEntryPointsIsNotFound) {
  auto library = DriverLibrary::open("libm.so.6");  // loads, but is no CUDA driver
  ASSERT_FALSE(library.ok());
  EXPECT_EQ(library.status().code(), StatusCode::kNotFound);
  EXPECT_NE(library.status().message().find("lacks cuGetErrorName"), std::string::npos)
      << library.status().message();
}

TEST(CudaDriverLibrary, VersionedNamesAreTheAbiNames) {
  EXPECT_STREQ(SIESTA_CUDA_SYMBOL(cuMemGetInfo), "cuMemGetInfo_v2");
  EXPECT_STREQ(SIESTA_CUDA_SYMBOL(cuMemcpyDtoHAsync), "cuMemcpyDtoHAsync_v2");
  EXPECT_STREQ(SIESTA_CUDA_SYMBOL(cuStreamDestroy), "cuStreamDestroy_v2");
  EXPECT_STREQ(SIESTA_CUDA_SYMBOL(cuDevicePrimaryCtxRelease), "cuDevicePrimaryCtxRelease_v2");
  EXPECT_STREQ(SIESTA_CUDA_SYMBOL(cuCtxPushCurrent), "cuCtxPushCurrent_v2");
  EXPECT_STREQ(SIESTA_CUDA_SYMBOL(cuMemAddressReserve), "cuMemAddressReserve");
}

TEST(CudaDriverLibrary, EveryEntryPointResolvesInTheToolkitStub) {
  const std::string stub = SIESTA_CUDA_STUB_LIBRARY;
  if (stub.empty() || !std::filesystem::exists(stub)) {
    GTEST_SKIP() << "no CUDA toolkit stub library at '" << stub << "'";
  }
  auto library = DriverLibrary::open(stub);
  ASSERT_TRUE(library.ok()) << library.status().to_string();
  const DriverApi& api = (*library)->api();
#define SIESTA_EXPECT_RESOLVED_(name) EXPECT_NE(api.name, nullptr) << SIESTA_CUDA_SYMBOL(name);
  SIESTA_CUDA_DRIVER_FUNCTIONS(SIESTA_EXPECT_RESOLVED_)
#undef SIESTA_EXPECT_RESOLVED_

  Status init = status_from_cu(api, api.cuInit(0), "cuInit(0)");
  EXPECT_EQ(init.code(), StatusCode::kNotFound) << init.to_string();
  EXPECT_EQ(init.message().rfind("cuInit(0) failed: CUDA_ERROR_STUB_LIBRARY: ", 0), 0u)
      << init.message();
  std::cout << "the stub says: " << init.to_string() << "\n";
}

}  // namespace
}  // namespace siesta::cuda
