// The fixture of the HostKernels tests: a SimBackend with one committed arena and a bump
// allocator, HostKernels on it, seeded random inputs (the seed printed by every test;
// SIESTA_KERNEL_SEED overrides it) and the comparisons the tests use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/small_sim_options.h"

namespace siesta::kernel_test {

using test_util::small_sim_options;

// ---- Seeded inputs ----

inline uint64_t kernel_seed() {
  static const uint64_t seed = [] {
    const char* text = std::getenv("SIESTA_KERNEL_SEED");
    return text != nullptr ? std::strtoull(text, nullptr, 10) : uint64_t{20261130};
  }();
  return seed;
}

class Random {
 public:
  explicit Random(uint64_t salt) : engine_(kernel_seed() * 1000003u + salt) {}
  std::vector<float> floats(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> out(n);
    for (float& f : out) f = dist(engine_);
    return out;
  }

 private:
  std::mt19937_64 engine_;
};

inline void print_seed() {
  std::printf("kernel seed: %llu (set SIESTA_KERNEL_SEED to reproduce)\n",
              static_cast<unsigned long long>(kernel_seed()));
}

template <class T>
std::span<const std::byte> as_bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span(v));
}

// ---- A SimBackend with one committed arena and a bump allocator ----

class HostKernelsTest : public ::testing::Test {
 protected:
  static constexpr size_t kArenaBytes = 2u << 20;

  void SetUp() override {
    print_seed();
    auto sim = SimBackend::create(small_sim_options());
    ASSERT_TRUE(sim.ok()) << sim.status().to_string();
    sim_ = std::move(sim).value();
    auto kernels = HostKernels::create(*sim_);
    ASSERT_TRUE(kernels.ok()) << kernels.status().to_string();
    kernels_ = std::move(kernels).value();
    auto range = ReservedRange::reserve(*sim_, kArenaBytes);
    ASSERT_TRUE(range.ok()) << range.status().to_string();
    arena_ = std::move(range).value();
    SIESTA_ASSERT_OK(sim_->commit(arena_.range()));
  }

  void TearDown() override {
    if (kernels_ != nullptr) SIESTA_EXPECT_OK(kernels_->synchronize());
  }

  DeviceAddress alloc(size_t bytes) {
    const size_t offset = next_;
    next_ = test_util::round_up(next_ + std::max<size_t>(bytes, 1), 256);
    EXPECT_LE(next_, kArenaBytes) << "test arena too small";
    return arena_.range().base + offset;
  }
  template <class T>
  DeviceAddress put(const std::vector<T>& values) {
    const DeviceAddress at = alloc(values.size() * sizeof(T));
    EXPECT_TRUE(kernels_->upload(as_bytes_of(values), at).ok());
    return at;
  }
  DeviceAddress put_params(int32_t token, int32_t position) {
    return put(std::vector<StepParams>{{token, position}});
  }
  std::vector<float> get(DeviceAddress at, size_t n) {
    std::vector<float> out(n);
    const Status s = kernels_->download(at, std::as_writable_bytes(std::span(out)));
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
  std::vector<std::byte> get_bytes(DeviceAddress at, size_t n) {
    std::vector<std::byte> out(n);
    const Status s = kernels_->download(at, out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out;
  }
  int32_t get_int(DeviceAddress at) {
    int32_t v = -1;
    EXPECT_TRUE(kernels_->download(at, std::as_writable_bytes(std::span(&v, 1))).ok());
    return v;
  }

  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<HostKernels> kernels_;
  ReservedRange arena_;  // destroyed (unreserved) before the backend
  size_t next_ = 0;
};

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                         double abs, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tolerance = rel * std::fabs(double{want[i]}) + abs;
    ASSERT_LE(std::fabs(double{got[i]} - want[i]), tolerance)
        << what << " at " << i << ": got " << got[i] << ", want " << want[i];
  }
}

inline void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << what;
}

}  // namespace siesta::kernel_test
