// What every e2e test does to start the real server: a command line extended with more
// flags, and a start that fails the test (printing the server's error) instead of aborting.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/server_process.h"

namespace siesta::testing {

// `args` followed by `more`.
inline std::vector<std::string> with(std::vector<std::string> args,
                                     const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The started server, or null after a test failure that says why it did not start.
inline std::unique_ptr<ServerProcess> start_or_die(const std::vector<std::string>& args) {
  Result<std::unique_ptr<ServerProcess>> server = ServerProcess::start(args);
  EXPECT_TRUE(server.ok()) << server.status().to_string();
  return server.ok() ? std::move(server).value() : nullptr;
}

}  // namespace siesta::testing
