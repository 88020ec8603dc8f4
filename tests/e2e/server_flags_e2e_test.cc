// The real binary refuses bad command lines and unsafe snapshot directories with exit status
// 2 and exactly one stderr line naming the flag and the rule (as the server this grew from did).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Runs the binary with `args` and expects the refusal: status 2, one stderr line that starts
// "siesta-server: " and contains every one of `words`, nothing on stdout.
void expect_refused(const std::vector<std::string>& args, const std::vector<std::string>& words) {
  Result<ProcessExit> run = ServerProcess::run_to_exit(args);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->exit_code, 2) << run->describe() << "\nstderr: " << run->stderr_text;
  EXPECT_EQ(run->stdout_text, "");
  const std::string& err = run->stderr_text;
  ASSERT_FALSE(err.empty());
  EXPECT_EQ(err.back(), '\n');
  EXPECT_EQ(err.find('\n'), err.size() - 1) << "more than one line:\n" << err;
  EXPECT_THAT(err, StartsWith("siesta-server: "));
  for (const std::string& word : words) EXPECT_THAT(err, HasSubstr(word));
}

TEST(ServerFlagsE2eTest, IdleAboveTheMaximum) {
  expect_refused({"--backend", "sim", "--cache-idle-seconds", "604801"},
                 {"--cache-idle-seconds", "604801", "between 0 and 604800"});
}

TEST(ServerFlagsE2eTest, ExpiryNotAboveIdle) {
  TempDir temp;
  expect_refused({"--backend", "sim", "--cache-idle-seconds", "60", "--cache-expire-seconds", "60",
                  "--cache-disk-dir", temp.file("d")},
                 {"--cache-expire-seconds (60) must be greater than --cache-idle-seconds (60)"});
  expect_refused({"--backend", "sim", "--cache-idle-seconds=60", "--cache-expire-seconds=30",
                  "--cache-disk-dir", temp.file("d")},
                 {"--cache-expire-seconds (30) must be greater than --cache-idle-seconds (60)"});
}

TEST(ServerFlagsE2eTest, EnabledWithoutDirectory) {
  expect_refused({"--backend", "sim", "--cache-idle-seconds", "30"},
                 {"--cache-disk-dir", "required", "--cache-idle-seconds"});
}

TEST(ServerFlagsE2eTest, NotAnInteger) {
  expect_refused({"--cache-idle-seconds", "12abc"},
                 {"--cache-idle-seconds", "integer", "\"12abc\""});
  expect_refused({"--cache-expire-seconds="}, {"--cache-expire-seconds", "integer"});
  expect_refused({"--port", "99999999999999999999"}, {"--port", "between 0 and 65535"});
}

TEST(ServerFlagsE2eTest, UnknownFlagAndMissingValue) {
  expect_refused({"--cache-idle"}, {"unknown flag \"--cache-idle\""});
  expect_refused({"--port"}, {"--port requires a value"});
  expect_refused({"stray"}, {"unexpected argument \"stray\""});
}

TEST(ServerFlagsE2eTest, BogusBackend) {
  expect_refused({"--backend", "bogus"}, {"--backend", "sim, cuda or auto", "\"bogus\""});
}

TEST(ServerFlagsE2eTest, DirectoryThatIsASymlink) {
  TempDir temp;
  const std::string real = temp.file("real");
  const std::string link = temp.file("link");
  ASSERT_EQ(::mkdir(real.c_str(), 0700), 0);
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  expect_refused({"--backend", "sim", "--cache-idle-seconds", "30", "--cache-disk-dir", link},
                 {"--cache-disk-dir: ", "\"" + link + "\"", "is a symlink"});
}

TEST(ServerFlagsE2eTest, DirectoryWritableByOthers) {
  TempDir temp;
  const std::string dir = temp.file("open");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  expect_refused({"--backend", "sim", "--cache-idle-seconds", "30", "--cache-disk-dir", dir},
                 {"--cache-disk-dir: ", "\"" + dir + "\"", "writable by group or others", "0777"});
}

TEST(ServerFlagsE2eTest, DirectoryThatIsAFile) {
  TempDir temp;
  const std::string file = temp.file("file");
  ASSERT_EQ(::close(::creat(file.c_str(), 0600)), 0);
  expect_refused({"--backend", "sim", "--cache-idle-seconds", "30", "--cache-disk-dir", file},
                 {"--cache-disk-dir: ", "\"" + file + "\"", "is not a directory"});
}

// Set but empty, the variable would otherwise turn authentication off without a word.
TEST(ServerFlagsE2eTest, AnEmptyApiKeyVariableIsRefused) {
  ASSERT_EQ(::setenv("SIESTA_API_KEY", "", 1), 0);
  expect_refused({"--backend", "sim"}, {"SIESTA_API_KEY must not be empty"});
  ASSERT_EQ(::unsetenv("SIESTA_API_KEY"), 0);
}

TEST(ServerFlagsE2eTest, HttpLimitsOutOfRange) {
  expect_refused({"--http-max-connections", "0"}, {"--http-max-connections", "between 1 and"});
  expect_refused({"--http-request-timeout-seconds", "0"},
                 {"--http-request-timeout-seconds", "between 1 and 3600"});
}

TEST(ServerFlagsE2eTest, HelpExitsZero) {
  Result<ProcessExit> run = ServerProcess::run_to_exit({"--help"});
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->exit_code, 0) << run->describe();
  EXPECT_EQ(run->stderr_text, "");
  EXPECT_THAT(run->stdout_text,
              AllOf(StartsWith("Usage: siesta-server"), HasSubstr("--host"), HasSubstr("--port"),
                    HasSubstr("--backend"), HasSubstr("--cache-idle-seconds"),
                    HasSubstr("--cache-expire-seconds"), HasSubstr("--cache-disk-dir"),
                    HasSubstr("--version"), HasSubstr("(default: 3600)")));
}

TEST(ServerFlagsE2eTest, VersionExitsZero) {
  Result<ProcessExit> run = ServerProcess::run_to_exit({"--version"});
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  EXPECT_EQ(run->exit_code, 0) << run->describe();
  EXPECT_EQ(run->stderr_text, "");
  EXPECT_THAT(run->stdout_text, StartsWith("siesta-server "));
  EXPECT_EQ(run->stdout_text.find('\n'), run->stdout_text.size() - 1);
  EXPECT_NE(run->stdout_text, "siesta-server unknown\n");
}

}  // namespace
}  // namespace siesta::testing
