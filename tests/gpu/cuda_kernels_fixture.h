// CudaKernelsTest: the fixture of the CudaKernels GPU tests. A CudaVmmBackend (the memory
// the engine computes in), a CudaKernels, and one committed arena handed out in 256-byte
// aligned blocks; values go in and out through the kernels' own upload/download.
// SetUp skips, printing why, where CUDA is unavailable.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cuda_vmm/cuda_kernels.h"
#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "compute/kernels.h"
#include "core/memory/memory_backend.h"

namespace siesta::test_util {

constexpr size_t kArenaBytes = size_t{96} << 20;

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

inline ::testing::AssertionResult Close(const std::vector<float>& want,
                                        const std::vector<float>& got, double abs_tol,
                                        double rel_tol) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(double{want[i]} - got[i]);
    if (!(diff <= abs_tol + rel_tol * std::fabs(double{want[i]}))) {
      return ::testing::AssertionFailure() << "element " << i << ": want " << want[i] << ", got "
                                           << got[i] << " (diff " << diff << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult SameBits(std::span<const std::byte> want,
                                           std::span<const std::byte> got) {
  if (want.size() != got.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] != got[i]) {
      return ::testing::AssertionFailure()
             << "byte " << i << ": want " << int(want[i]) << ", got " << int(got[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

template <class T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = CudaVmmBackend::unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "CUDA unavailable: " << reason;
    auto backend = CudaVmmBackend::create();
    ASSERT_TRUE(backend.ok()) << backend.status().to_string();
    backend_ = std::move(backend).value();
    auto kernels = CudaKernels::create();
    ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
    kernels_ = std::move(kernels).value();
    auto range = ReservedRange::reserve(*backend_, kArenaBytes);
    ASSERT_TRUE(range.ok()) << range.status().to_string();
    arena_ = std::move(range).value();
    ASSERT_TRUE(backend_->commit(arena_.range()).ok());
  }

  void TearDown() override {
    arena_.reset();  // before the backend goes
    kernels_.reset();
    backend_.reset();
  }

  // A fresh 256-byte aligned block of the arena.
  DeviceAddress alloc(size_t bytes) {
    const DeviceAddress at = arena_.range().base + used_;
    used_ += (bytes + 255) / 256 * 256;
    EXPECT_LE(used_, kArenaBytes) << "the test arena is too small";
    return at;
  }
  template <class T>
  DeviceAddress put(const std::vector<T>& values) {
    const DeviceAddress at = alloc(values.size() * sizeof(T));
    write(at, values);
    return at;
  }
  template <class T>
  void write(DeviceAddress at, const std::vector<T>& values) {
    Status status = kernels_->upload(bytes_of(values), at);
    ASSERT_TRUE(status.ok()) << status.to_string();
  }
  DeviceAddress put_params(int32_t token, int32_t position) {
    return put(std::vector<StepParams>{{token, position}});
  }
  template <class T>
  std::vector<T> get(DeviceAddress at, size_t count) {
    std::vector<T> out(count);
    Status status = kernels_->download(at, std::as_writable_bytes(std::span(out)));
    EXPECT_TRUE(status.ok()) << status.to_string();
    return out;
  }

  std::unique_ptr<CudaVmmBackend> backend_;
  std::unique_ptr<Kernels> kernels_;
  ReservedRange arena_;
  size_t used_ = 0;
};

}  // namespace siesta::test_util
