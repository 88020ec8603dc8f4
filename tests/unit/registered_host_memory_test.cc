// RegisteredHostMemory: what may be registered (whole pages, no overlap) and whether a copy
// lies within one registration.
#include "core/memory/registered_host_memory.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <memory>

#include "core/memory/host_address_space.h"

namespace siesta {
namespace {

class RegisteredHostMemoryTest : public ::testing::Test {
 protected:
  // Addresses only: the registry never touches the bytes.
  std::byte* at(size_t page) { return base_ + page * page_; }
  std::span<std::byte> pages(size_t first, size_t count) { return {at(first), count * page_}; }

  const size_t page_ = host_address_space::page_size();
  std::unique_ptr<std::byte[]> storage_ = std::make_unique<std::byte[]>(17 * page_);
  std::byte* base_ = storage_.get() + (page_ - reinterpret_cast<uintptr_t>(storage_.get()) % page_);
  RegisteredHostMemory registry_;
};

TEST_F(RegisteredHostMemoryTest, OnlyWholePagesThatOverlapNothingAreTaken) {
  EXPECT_EQ(registry_.check_new({at(0) + 1, page_}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.check_new({at(0), page_ + 1}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.check_new({at(0), 0}).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(registry_.check_new(pages(4, 4)).ok());
  registry_.add(pages(4, 4));
  // Every overlap: the same, inside, across either end, around.
  for (auto [first, count] : {std::pair<size_t, size_t>{4, 4}, {5, 1}, {3, 2}, {7, 3}, {2, 8}}) {
    EXPECT_EQ(registry_.check_new(pages(first, count)).code(), StatusCode::kInvalidArgument)
        << "pages " << first << " + " << count;
  }
  // Touching it on either side is no overlap.
  EXPECT_TRUE(registry_.check_new(pages(2, 2)).ok());
  EXPECT_TRUE(registry_.check_new(pages(8, 2)).ok());
  EXPECT_EQ(registry_.count(), 1u);
}

TEST_F(RegisteredHostMemoryTest, ACopyMustLieWithinOneRegistration) {
  registry_.add(pages(0, 2));
  registry_.add(pages(2, 2));
  EXPECT_TRUE(registry_.check_within(at(0), 2 * page_, "copy").ok());
  EXPECT_TRUE(registry_.check_within(at(1) + 5, page_ - 5, "copy").ok());
  EXPECT_TRUE(registry_.check_within(at(2), 0, "copy").ok());
  // Across the two registrations, even though they touch: refused.
  EXPECT_EQ(registry_.check_within(at(1), page_ + 1, "copy").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.check_within(at(4), 1, "copy").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(registry_.check_within(base_ - 1, 1, "copy").code(), StatusCode::kInvalidArgument);
  const Status refused = registry_.check_within(at(5), 8, "copy_to_host destination");
  EXPECT_NE(refused.message().find("copy_to_host destination"), std::string::npos);
}

TEST_F(RegisteredHostMemoryTest, RemovingGivesTheSizeOnceAndFreesTheAddresses) {
  registry_.add(pages(3, 5));
  EXPECT_EQ(registry_.remove(at(4)), 0u) << "not the start of a registration";
  EXPECT_EQ(registry_.remove(at(3)), 5 * page_);
  EXPECT_EQ(registry_.remove(at(3)), 0u);
  EXPECT_EQ(registry_.count(), 0u);
  EXPECT_TRUE(registry_.check_new(pages(3, 5)).ok());
  EXPECT_EQ(registry_.check_within(at(3), 1, "copy").code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace siesta
