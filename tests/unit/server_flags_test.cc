// The siesta-server command line: grammar, every rule and boundary, help and version.
#include "server/server_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace siesta::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

Result<ParsedFlags> parse(std::initializer_list<std::string_view> args) {
  std::vector<std::string_view> list(args);
  return parse_server_flags(std::span<const std::string_view>(list));
}

// The config of a command line that must be accepted.
ServerConfig run_config(std::initializer_list<std::string_view> args) {
  Result<ParsedFlags> parsed = parse(args);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  if (!parsed.ok()) return {};
  EXPECT_EQ(parsed->action, ParsedFlags::Action::kRun);
  return parsed->config;
}

// The message of a command line that must be refused (InvalidArgument, one line).
std::string error_of(std::initializer_list<std::string_view> args) {
  Result<ParsedFlags> parsed = parse(args);
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), Not(HasSubstr("\n")));
  return parsed.status().message();
}

TEST(ServerFlagsTest, Defaults) {
  ServerConfig config = run_config({});
  EXPECT_EQ(config.host, "127.0.0.1");
  EXPECT_EQ(config.port, 8080);
  EXPECT_EQ(config.backend, BackendKind::kAuto);
  EXPECT_EQ(config.offload.idle_seconds, 0);
  EXPECT_EQ(config.offload.expire_seconds, 3600);
  EXPECT_EQ(config.offload.disk_dir, "");
}

TEST(ServerFlagsTest, EveryFlagInBothForms) {
  ServerConfig spaced =
      run_config({"--host", "0.0.0.0", "--port", "9000", "--backend", "sim", "--cache-idle-seconds",
                  "30", "--cache-expire-seconds", "90", "--cache-disk-dir", "/tmp/x"});
  ServerConfig joined =
      run_config({"--host=0.0.0.0", "--port=9000", "--backend=sim", "--cache-idle-seconds=30",
                  "--cache-expire-seconds=90", "--cache-disk-dir=/tmp/x"});
  for (const ServerConfig& config : {spaced, joined}) {
    EXPECT_EQ(config.host, "0.0.0.0");
    EXPECT_EQ(config.port, 9000);
    EXPECT_EQ(config.backend, BackendKind::kSim);
    EXPECT_EQ(config.offload.idle_seconds, 30);
    EXPECT_EQ(config.offload.expire_seconds, 90);
    EXPECT_EQ(config.offload.disk_dir, "/tmp/x");
  }
}

TEST(ServerFlagsTest, ValueMayContainEquals) {
  EXPECT_EQ(run_config({"--cache-disk-dir=/tmp/a=b"}).offload.disk_dir, "/tmp/a=b");
}

TEST(ServerFlagsTest, BackendKinds) {
  EXPECT_EQ(run_config({"--backend", "sim"}).backend, BackendKind::kSim);
  EXPECT_EQ(run_config({"--backend", "cuda"}).backend, BackendKind::kCuda);
  EXPECT_EQ(run_config({"--backend", "auto"}).backend, BackendKind::kAuto);
  EXPECT_EQ(error_of({"--backend", "bogus"}), "--backend must be sim, cuda or auto, got \"bogus\"");
  EXPECT_THAT(error_of({"--backend", "SIM"}), HasSubstr("--backend must be"));
}

TEST(ServerFlagsTest, IdleBoundaries) {
  EXPECT_EQ(run_config({"--cache-idle-seconds", "0"}).offload.idle_seconds, 0);
  EXPECT_EQ(run_config({"--cache-idle-seconds", "604799", "--cache-expire-seconds", "604800",
                        "--cache-disk-dir", "/d"})
                .offload.idle_seconds,
            604799);
  EXPECT_EQ(error_of({"--cache-idle-seconds", "604801"}),
            "--cache-idle-seconds (604801) must be between 0 and 604800");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "-1"}),
            "--cache-idle-seconds (-1) must be between 0 and 604800");
}

TEST(ServerFlagsTest, ExpiryBoundaries) {
  EXPECT_EQ(run_config({"--cache-expire-seconds", "0"}).offload.expire_seconds, 0);
  EXPECT_EQ(run_config({"--cache-expire-seconds", "604800"}).offload.expire_seconds, 604800);
  EXPECT_EQ(error_of({"--cache-expire-seconds", "604801"}),
            "--cache-expire-seconds (604801) must be between 0 and 604800");
}

TEST(ServerFlagsTest, IntegersAreStrict) {
  const std::string rule = "--cache-idle-seconds must be an integer between 0 and 604800, got ";
  EXPECT_EQ(error_of({"--cache-idle-seconds", "12abc"}), rule + "\"12abc\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds="}), rule + "\"\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", ""}), rule + "\"\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "+5"}), rule + "\"+5\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", " 5"}), rule + "\" 5\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "5 "}), rule + "\"5 \"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "0x10"}), rule + "\"0x10\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "1e3"}), rule + "\"1e3\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "3.5"}), rule + "\"3.5\"");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "--5"}), "--cache-idle-seconds requires a value (N)");
}

TEST(ServerFlagsTest, HugeIntegersAreOutOfRangeNotWrapped) {
  EXPECT_EQ(error_of({"--cache-idle-seconds", "99999999999999999999"}),
            "--cache-idle-seconds (99999999999999999999) must be between 0 and 604800");
  EXPECT_EQ(error_of({"--cache-expire-seconds", "-99999999999999999999"}),
            "--cache-expire-seconds (-99999999999999999999) must be between 0 and 604800");
  // 2^64 + 30 would be 30 if it wrapped.
  EXPECT_THAT(error_of({"--cache-idle-seconds", "18446744073709551646"}),
              HasSubstr("must be between 0 and 604800"));
  EXPECT_THAT(error_of({"--port", "4294975488"}), HasSubstr("must be between 0 and 65535"));
}

TEST(ServerFlagsTest, LeadingZerosAreDecimal) {
  EXPECT_EQ(run_config({"--port", "0080"}).port, 80);
}

TEST(ServerFlagsTest, PortBoundaries) {
  EXPECT_EQ(run_config({"--port", "0"}).port, 0);
  EXPECT_EQ(run_config({"--port", "65535"}).port, 65535);
  EXPECT_EQ(error_of({"--port", "65536"}), "--port (65536) must be between 0 and 65535");
  EXPECT_EQ(error_of({"--port", "-1"}), "--port (-1) must be between 0 and 65535");
  EXPECT_EQ(error_of({"--port", "http"}),
            "--port must be an integer between 0 and 65535, got \"http\"");
}

TEST(ServerFlagsTest, HostMustNotBeEmpty) {
  EXPECT_EQ(error_of({"--host="}), "--host must not be empty");
}

TEST(ServerFlagsTest, ExpiryMustExceedIdleWhenEnabled) {
  EXPECT_EQ(error_of({"--cache-idle-seconds", "60", "--cache-expire-seconds", "30",
                      "--cache-disk-dir", "/d"}),
            "--cache-expire-seconds (30) must be greater than --cache-idle-seconds (60)");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "60", "--cache-expire-seconds", "60",
                      "--cache-disk-dir", "/d"}),
            "--cache-expire-seconds (60) must be greater than --cache-idle-seconds (60)");
  // The default expiry (3600) applies when only the idle time is given.
  EXPECT_THAT(error_of({"--cache-idle-seconds", "3600", "--cache-disk-dir", "/d"}),
              HasSubstr("must be greater than --cache-idle-seconds (3600)"));
  EXPECT_EQ(
      run_config({"--cache-idle-seconds", "3599", "--cache-disk-dir", "/d"}).offload.expire_seconds,
      3600);
}

TEST(ServerFlagsTest, EnabledWithoutDirectory) {
  EXPECT_EQ(error_of({"--cache-idle-seconds", "30"}),
            "--cache-disk-dir is required when --cache-idle-seconds is not 0");
  EXPECT_EQ(error_of({"--cache-idle-seconds", "30", "--cache-disk-dir="}),
            "--cache-disk-dir is required when --cache-idle-seconds is not 0");
}

TEST(ServerFlagsTest, RulesAreCheckedAfterAllFlagsWhateverTheOrder) {
  // The directory given after the idle time still counts.
  EXPECT_TRUE(parse({"--cache-disk-dir", "/d", "--cache-idle-seconds", "30"}).ok());
  EXPECT_TRUE(parse({"--cache-idle-seconds", "30", "--cache-disk-dir", "/d"}).ok());
}

TEST(ServerFlagsTest, UnknownFlag) {
  EXPECT_EQ(error_of({"--bogus"}), "unknown flag \"--bogus\" (see --help)");
  EXPECT_EQ(error_of({"--bogus=1"}), "unknown flag \"--bogus\" (see --help)");
  EXPECT_EQ(error_of({"-p", "80"}), "unknown flag \"-p\" (see --help)");
  EXPECT_EQ(error_of({"--Port", "80"}), "unknown flag \"--Port\" (see --help)");
  // Whatever bytes the name holds, the message stays one printable line.
  EXPECT_EQ(error_of({"--x\ny"}), "unknown flag \"--x\\ny\" (see --help)");
  // An unknown flag is reported even when a value-taking flag precedes it correctly.
  EXPECT_THAT(error_of({"--port", "80", "--cache-idle", "5"}), HasSubstr("--cache-idle"));
}

TEST(ServerFlagsTest, PositionalArgumentsAreRefused) {
  EXPECT_THAT(error_of({"serve"}), HasSubstr("unexpected argument \"serve\""));
  EXPECT_THAT(error_of({"--port", "80", "81"}), HasSubstr("unexpected argument \"81\""));
  EXPECT_THAT(error_of({"--"}), HasSubstr("unexpected argument \"--\""));
}

TEST(ServerFlagsTest, MissingValue) {
  EXPECT_EQ(error_of({"--port"}), "--port requires a value (N)");
  EXPECT_EQ(error_of({"--cache-disk-dir"}), "--cache-disk-dir requires a value (DIR)");
  // A flag where the value should be is a forgotten value, not the value.
  EXPECT_EQ(error_of({"--cache-disk-dir", "--port", "80"}),
            "--cache-disk-dir requires a value (DIR)");
  // ...unless given in the = form.
  EXPECT_EQ(run_config({"--cache-disk-dir=--odd"}).offload.disk_dir, "--odd");
}

TEST(ServerFlagsTest, RepeatedFlagLastOneWins) {
  // Documented behaviour: scripts/serve passes defaults first and the user's flags after.
  EXPECT_EQ(run_config({"--port", "1", "--port", "2"}).port, 2);
  EXPECT_EQ(run_config({"--backend=cuda", "--backend", "sim"}).backend, BackendKind::kSim);
  EXPECT_EQ(run_config({"--cache-idle-seconds", "300", "--cache-disk-dir", "/d",
                        "--cache-idle-seconds", "0"})
                .offload.idle_seconds,
            0);
  // Each occurrence is still checked on its own.
  EXPECT_THAT(error_of({"--port", "x", "--port", "2"}), HasSubstr("--port must be an integer"));
}

TEST(ServerFlagsTest, HelpAndVersion) {
  Result<ParsedFlags> help = parse({"--help"});
  ASSERT_TRUE(help.ok());
  EXPECT_EQ(help->action, ParsedFlags::Action::kHelp);
  EXPECT_EQ(parse({"-h"})->action, ParsedFlags::Action::kHelp);
  Result<ParsedFlags> version = parse({"--version"});
  ASSERT_TRUE(version.ok());
  EXPECT_EQ(version->action, ParsedFlags::Action::kVersion);
  // The first of them wins; what follows is not examined, what precedes is.
  EXPECT_EQ(parse({"--version", "--help"})->action, ParsedFlags::Action::kVersion);
  EXPECT_EQ(parse({"--help", "--bogus"})->action, ParsedFlags::Action::kHelp);
  EXPECT_THAT(error_of({"--bogus", "--help"}), HasSubstr("--bogus"));
  EXPECT_EQ(error_of({"--help=yes"}), "--help takes no value");
}

TEST(ServerFlagsTest, HelpListsEveryFlagWithItsDefault) {
  const std::string help = server_help_text();
  EXPECT_THAT(help, HasSubstr("Usage: siesta-server"));
  EXPECT_THAT(help, AllOf(HasSubstr("--host HOST"), HasSubstr("(default: 127.0.0.1)")));
  EXPECT_THAT(help, AllOf(HasSubstr("--port N"), HasSubstr("(default: 8080)")));
  EXPECT_THAT(help, AllOf(HasSubstr("--backend sim|cuda|auto"), HasSubstr("(default: auto)")));
  EXPECT_THAT(help, AllOf(HasSubstr("--cache-idle-seconds N"), HasSubstr("(default: 0)")));
  EXPECT_THAT(help, AllOf(HasSubstr("--cache-expire-seconds N"), HasSubstr("(default: 3600)")));
  EXPECT_THAT(help, AllOf(HasSubstr("--cache-disk-dir DIR"), HasSubstr("(default: none)")));
  EXPECT_THAT(help, HasSubstr("--help"));
  EXPECT_THAT(help, HasSubstr("--version"));
  EXPECT_EQ(help.back(), '\n');
  // Every line fits 100 columns.
  size_t start = 0;
  while (start < help.size()) {
    size_t end = help.find('\n', start);
    EXPECT_LE(end - start, 100u) << help.substr(start, end - start);
    start = end + 1;
  }
}

TEST(ServerFlagsTest, VersionText) {
  EXPECT_FALSE(server_version().empty());
  EXPECT_NE(server_version(), "unknown");
  EXPECT_EQ(server_version_text(), "siesta-server " + std::string(server_version()) + "\n");
}

TEST(ServerFlagsTest, ArgvOverload) {
  const char* argv[] = {"siesta-server", "--port", "0", "--backend=sim"};
  Result<ParsedFlags> parsed = parse_server_flags(4, argv);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->config.port, 0);
  EXPECT_EQ(parsed->config.backend, BackendKind::kSim);
}

}  // namespace
}  // namespace siesta::server
