// What every e2e test does to start and stop the real server: a command line extended with
// more flags, a start that fails the test (printing the server's error) instead of aborting,
// and a stop that expects a clean exit.
#pragma once

#include <gtest/gtest.h>

#include <csignal>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/server_process.h"

namespace siesta::testing {

// The smallest model on the simulator: what most API tests serve.
inline const std::vector<std::string> kTinyModel = {"--backend", "sim", "--model",
                                                    "synthetic:tiny"};

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

// Stops `server` with SIGTERM and expects exit code 0 (a failure prints the server's stderr).
inline void expect_clean_exit(ServerProcess& server) {
  Result<ProcessExit> exit = server.stop(SIGTERM);
  ASSERT_TRUE(exit.ok()) << exit.status().to_string();
  EXPECT_EQ(exit->exit_code, 0) << exit->describe() << "\nstderr:\n" << exit->stderr_text;
}

}  // namespace siesta::testing
