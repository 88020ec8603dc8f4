// Every RapidCheck property test prints, before any property runs, the parameters it runs
// with -- above all the seed, so that a failure can be replayed with RC_PARAMS="seed=...".
// Including this header in a test binary registers the printing once (an inline variable).
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstdlib>
#include <iostream>

namespace siesta::testing {

class PrintRapidCheckParams : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* env = std::getenv("RC_PARAMS");
    const auto& params = rc::detail::configuration().testParams;
    std::cout << "rapidcheck: RC_PARAMS=\"" << (env != nullptr ? env : "")
              << "\" seed=" << params.seed << " max_success=" << params.maxSuccess
              << " max_size=" << params.maxSize << "\n";
  }
};

[[maybe_unused]] inline const ::testing::Environment* const kPrintRapidCheckParams =
    ::testing::AddGlobalTestEnvironment(new PrintRapidCheckParams);  // gtest owns it

}  // namespace siesta::testing
