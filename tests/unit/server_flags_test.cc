// The siesta-server command line: grammar, every rule and boundary, help and version.
#include "server/server_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <initializer_list>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/log_text.h"
namespace siesta::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

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
  EXPECT_EQ(config.backend, runtime::BackendKind::kAuto);
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
    EXPECT_EQ(config.backend, runtime::BackendKind::kSim);
    EXPECT_EQ(config.offload.idle_seconds, 30);
    EXPECT_EQ(config.offload.expire_seconds, 90);
    EXPECT_EQ(config.offload.disk_dir, "/tmp/x");
  }
}

TEST(ServerFlagsTest, ValueMayContainEquals) {
  EXPECT_EQ(run_config({"--cache-disk-dir=/tmp/a=b"}).offload.disk_dir, "/tmp/a=b");
}

TEST(ServerFlagsTest, BackendKinds) {
  EXPECT_EQ(run_config({"--backend", "sim"}).backend, runtime::BackendKind::kSim);
  EXPECT_EQ(run_config({"--backend", "cuda"}).backend, runtime::BackendKind::kCuda);
  EXPECT_EQ(run_config({"--backend", "auto"}).backend, runtime::BackendKind::kAuto);
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
  EXPECT_EQ(run_config({"--backend=cuda", "--backend", "sim"}).backend, runtime::BackendKind::kSim);
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

TEST(ServerFlagsTest, NewFlagDefaults) {
  ServerConfig config = run_config({});
  EXPECT_EQ(config.model, "synthetic:small");
  EXPECT_FALSE(config.context.has_value());
  EXPECT_FALSE(config.kv_type.has_value());
  EXPECT_TRUE(config.offload.encrypt);
  EXPECT_EQ(config.slot_save_path, "");
  EXPECT_EQ(config.api_key, "");
  EXPECT_EQ(config.max_body_bytes, 1u << 20);
  EXPECT_EQ(config.parallel, 1u);
  EXPECT_EQ(config.devices, 1u);
}

TEST(ServerFlagsTest, ModelContextAndKvType) {
  ServerConfig config =
      run_config({"--model", "synthetic:tiny", "--ctx", "128", "--kv-type", "int8"});
  EXPECT_EQ(config.model, "synthetic:tiny");
  EXPECT_EQ(config.context, 128u);
  EXPECT_EQ(config.kv_type, KvType::kInt8);
  EXPECT_EQ(run_config({"--kv-type=f32"}).kv_type, KvType::kF32);
  EXPECT_EQ(run_config({"--kv-type=f16"}).kv_type, KvType::kF16);
  EXPECT_EQ(error_of({"--kv-type", "q4"}), "--kv-type must be f32, f16 or int8, got \"q4\"");
  EXPECT_THAT(error_of({"--model", "synthetic:huge"}),
              AllOf(HasSubstr("--model \"synthetic:huge\""), HasSubstr("synthetic:tiny")));
  EXPECT_THAT(error_of({"--model", "llama.gguf"}), HasSubstr("--model \"llama.gguf\""));
  EXPECT_EQ(error_of({"--model="}), "--model must not be empty");
  EXPECT_EQ(error_of({"--ctx", "0"}), "--ctx (0) must be between 1 and 1048576");
  EXPECT_EQ(error_of({"--ctx", "1048577"}), "--ctx (1048577) must be between 1 and 1048576");
  EXPECT_EQ(run_config({"--ctx", "1"}).context, 1u);  // the interval shrinks to the context
  // --ctx and --kv-type are judged with the model they apply to, and named in the message.
  const std::string odd =
      error_of({"--model", "synthetic:nope", "--ctx", "64", "--kv-type", "f16"});
  EXPECT_THAT(odd, HasSubstr("--model \"synthetic:nope\" --ctx 64 --kv-type f16: "));
}

TEST(ServerFlagsTest, CacheEncrypt) {
  EXPECT_TRUE(run_config({"--cache-encrypt", "on"}).offload.encrypt);
  EXPECT_FALSE(run_config({"--cache-encrypt=off"}).offload.encrypt);
  EXPECT_EQ(error_of({"--cache-encrypt", "yes"}), "--cache-encrypt must be on or off, got \"yes\"");
}

TEST(ServerFlagsTest, CacheDeltaSaves) {
  EXPECT_EQ(ServerConfig{}.offload.delta_segments, 8u);
  EXPECT_EQ(run_config({"--cache-delta-saves", "0"}).offload.delta_segments, 0u);
  EXPECT_EQ(run_config({"--cache-delta-saves=64"}).offload.delta_segments, 64u);
  EXPECT_THAT(error_of({"--cache-delta-saves", "65"}), HasSubstr("--cache-delta-saves"));
  EXPECT_THAT(error_of({"--cache-delta-saves", "-1"}), HasSubstr("(-1) must be between"));
}

TEST(ServerFlagsTest, AliasNamesTheModelInAnswers) {
  EXPECT_EQ(ServerConfig{}.model_id(), "synthetic:small");
  const ServerConfig aliased = run_config({"--alias", "gpt-local"});
  EXPECT_EQ(aliased.model_id(), "gpt-local");
  EXPECT_EQ(aliased.model, "synthetic:small") << "the alias names the model, it is not one";
  EXPECT_EQ(error_of({"--alias="}), "--alias must not be empty");
  EXPECT_THAT(error_of({"--alias", std::string(257, 'a')}), HasSubstr("at most 256 bytes"));
}

// A switch takes no value: "--no-slots" alone, never "--no-slots=1" or "--no-slots yes".
TEST(ServerFlagsTest, NoSlotsIsASwitch) {
  EXPECT_TRUE(ServerConfig{}.slots_endpoints);
  EXPECT_FALSE(run_config({"--no-slots"}).slots_endpoints);
  EXPECT_FALSE(run_config({"--no-slots", "--parallel", "2"}).slots_endpoints);
  EXPECT_EQ(error_of({"--no-slots=1"}), "--no-slots takes no value");
  EXPECT_THAT(error_of({"--no-slots", "yes"}), HasSubstr("unexpected argument"));
}

TEST(ServerFlagsTest, SlotSavePath) {
  EXPECT_EQ(run_config({"--slot-save-path", "/s"}).slot_save_path, "/s");
  EXPECT_EQ(error_of({"--slot-save-path="}), "--slot-save-path must not be empty");
}

TEST(ServerFlagsTest, ApiKeyFromFlagOrEnvironmentNeverPrinted) {
  auto parse_env = [](std::initializer_list<std::string_view> args, std::string_view env) {
    std::vector<std::string_view> list(args);
    return parse_server_flags(std::span<const std::string_view>(list), env);
  };
  EXPECT_EQ(run_config({"--api-key", "k-123"}).api_key, "k-123");
  Result<ParsedFlags> from_env = parse_env({}, "env-key");
  ASSERT_TRUE(from_env.ok());
  EXPECT_EQ(from_env->config.api_key, "env-key");
  // The flag wins over the environment, wherever it appears.
  Result<ParsedFlags> both = parse_env({"--api-key", "flag-key"}, "env-key");
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->config.api_key, "flag-key");
  EXPECT_EQ(error_of({"--api-key="}), "--api-key must not be empty");
  const std::string bad = error_of({"--api-key", "has space-secret"});
  EXPECT_THAT(bad, HasSubstr("--api-key must be printable ASCII"));
  EXPECT_THAT(bad, Not(HasSubstr("secret")));
  // Set but empty: refused as --api-key '' is, not taken for "no key".
  Result<ParsedFlags> empty_env = parse_env({}, "");
  ASSERT_FALSE(empty_env.ok());
  EXPECT_EQ(empty_env.status().message(), "SIESTA_API_KEY must not be empty");
  // Unset: no key.
  std::vector<std::string_view> none;
  Result<ParsedFlags> unset = parse_server_flags(std::span<const std::string_view>(none));
  ASSERT_TRUE(unset.ok());
  EXPECT_EQ(unset->config.api_key, "");
  // The flag still wins over an empty variable.
  Result<ParsedFlags> flag_over_empty = parse_env({"--api-key", "flag-key"}, "");
  ASSERT_TRUE(flag_over_empty.ok());
  EXPECT_EQ(flag_over_empty->config.api_key, "flag-key");
  Result<ParsedFlags> bad_env = parse_env({}, "tab\tsecret");
  ASSERT_FALSE(bad_env.ok());
  EXPECT_THAT(bad_env.status().message(), HasSubstr("SIESTA_API_KEY"));
  EXPECT_THAT(bad_env.status().message(), Not(HasSubstr("secret")));
  // Another flag's error does not echo the key either.
  EXPECT_THAT(error_of({"--api-key", "k-123", "--port", "x"}), Not(HasSubstr("k-123")));
  EXPECT_THAT(server_help_text(), Not(HasSubstr("k-123")));
}

TEST(ServerFlagsTest, MaxBodyBytesBoundaries) {
  EXPECT_EQ(run_config({"--max-body-bytes", "1024"}).max_body_bytes, 1024u);
  EXPECT_EQ(run_config({"--max-body-bytes", "67108864"}).max_body_bytes, 67108864u);
  EXPECT_EQ(error_of({"--max-body-bytes", "1023"}),
            "--max-body-bytes (1023) must be between 1024 and 67108864");
  EXPECT_EQ(error_of({"--max-body-bytes", "67108865"}),
            "--max-body-bytes (67108865) must be between 1024 and 67108864");
}

TEST(ServerFlagsTest, HttpLimits) {
  const ServerConfig defaults = run_config({});
  EXPECT_EQ(defaults.http_max_connections, 512u);
  EXPECT_EQ(defaults.http_request_timeout_seconds, 10u);
  EXPECT_EQ(run_config({"--http-max-connections", "1"}).http_max_connections, 1u);
  EXPECT_EQ(run_config({"--http-max-connections=65536"}).http_max_connections, 65536u);
  EXPECT_EQ(error_of({"--http-max-connections", "0"}),
            "--http-max-connections (0) must be between 1 and 65536");
  EXPECT_EQ(error_of({"--http-max-connections", "65537"}),
            "--http-max-connections (65537) must be between 1 and 65536");
  EXPECT_EQ(run_config({"--http-request-timeout-seconds", "1"}).http_request_timeout_seconds, 1u);
  EXPECT_EQ(run_config({"--http-request-timeout-seconds", "3600"}).http_request_timeout_seconds,
            3600u);
  EXPECT_EQ(error_of({"--http-request-timeout-seconds", "0"}),
            "--http-request-timeout-seconds (0) must be between 1 and 3600");
  EXPECT_EQ(error_of({"--http-request-timeout-seconds", "1.5"}),
            "--http-request-timeout-seconds must be an integer between 1 and 3600, got \"1.5\"");
  const std::string help = server_help_text();
  EXPECT_THAT(help, HasSubstr("--http-max-connections N"));
  EXPECT_THAT(help, HasSubstr("(default: 512)"));
  EXPECT_THAT(help, HasSubstr("--http-request-timeout-seconds N"));
  EXPECT_THAT(help, HasSubstr("SIGHUP"));
}

TEST(ServerFlagsTest, ParallelAndDevices) {
  EXPECT_EQ(run_config({"--parallel", "1", "--devices", "1"}).parallel, 1u);
  EXPECT_EQ(error_of({"--parallel", "0"}), "--parallel (0) must be between 1 and 64");
  EXPECT_EQ(error_of({"--devices", "65"}), "--devices (65) must be between 1 and 64");
  // Several sessions resident at once are served, with offload on or off.
  EXPECT_EQ(run_config({"--parallel", "2"}).parallel, 2u);
  EXPECT_EQ(run_config({"--parallel", "2"}).sessions(), 2u);
  EXPECT_EQ(run_config({"--parallel", "2", "--cache-idle-seconds", "30", "--cache-disk-dir", "/d"})
                .parallel,
            2u);
  // Offload off: more than one device is not implemented.
  EXPECT_EQ(error_of({"--devices", "4"}),
            "--devices 4: splitting the model over devices is not implemented by this engine "
            "(use 1)");
  // Offload on: a combination idle offload refuses, named as such, whatever the order.
  EXPECT_EQ(error_of({"--cache-idle-seconds", "30", "--cache-disk-dir", "/d", "--devices", "2"}),
            "--devices 2 cannot be used with --cache-idle-seconds: idle offload keeps a "
            "session's memory on one device");
  // The last one wins here too.
  EXPECT_EQ(run_config({"--parallel", "8", "--parallel", "1"}).parallel, 1u);
}

TEST(ServerFlagsTest, MaxSessionsAndSessionMatch) {
  EXPECT_EQ(run_config({}).sessions(), 1u);
  EXPECT_EQ(run_config({}).session_match, 0.5);
  EXPECT_EQ(run_config({"--parallel", "2", "--max-sessions", "8", "--cache-idle-seconds", "30",
                        "--cache-disk-dir", "/d"})
                .sessions(),
            8u);
  EXPECT_EQ(run_config({"--parallel", "3", "--max-sessions", "3"}).sessions(), 3u);
  EXPECT_EQ(error_of({"--parallel", "2", "--max-sessions", "8"}),
            "--max-sessions 8 (more than --parallel 2) needs idle offload: --cache-idle-seconds "
            "N and --cache-disk-dir DIR keep the conversations that are not on the device");
  EXPECT_EQ(error_of({"--parallel", "4", "--max-sessions", "2", "--cache-idle-seconds", "30",
                      "--cache-disk-dir", "/d"}),
            "--max-sessions 2 must be at least --parallel (4)");
  EXPECT_EQ(error_of({"--max-sessions", "4097"}),
            "--max-sessions (4097) must be between 1 and 4096");
  EXPECT_EQ(run_config({"--session-match", "0.25"}).session_match, 0.25);
  EXPECT_EQ(run_config({"--session-match", "1"}).session_match, 1.0);
  EXPECT_EQ(run_config({"--session-match", "0"}).session_match, 0.0);
  for (const char* bad : {"1.5", "-0.1", "abc", "", "0.5.5", "1e-1", " 0.5", "."}) {
    EXPECT_EQ(error_of({"--session-match", bad}),
              "--session-match must be a number between 0 and 1, got \"" + std::string(bad) + "\"")
        << bad;
  }
}

TEST(ServerFlagsTest, HelpListsTheNewFlags) {
  const std::string help = server_help_text();
  for (const char* flag :
       {"--model synthetic:SIZE", "--ctx N", "--kv-type f32|f16|int8", "--cache-encrypt on|off",
        "--slot-save-path DIR", "--api-key KEY", "--max-body-bytes N", "--parallel N",
        "--devices N", "--max-sessions N", "--session-match F", "--cache-delta-saves N"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
  EXPECT_THAT(help, HasSubstr("(default: synthetic:small)"));
  EXPECT_THAT(help, HasSubstr("(default: 1048576)"));
  EXPECT_THAT(help, HasSubstr("(default: on)"));
  EXPECT_THAT(help, HasSubstr("SIESTA_API_KEY"));
}

TEST(ServerFlagsTest, CorsOriginIsRepeatable) {
  EXPECT_TRUE(run_config({}).cors_origins.empty());
  EXPECT_THAT(run_config({"--cors-origin", "http://localhost:3000"}).cors_origins,
              ::testing::ElementsAre("http://localhost:3000"));
  // Each occurrence adds one, in order; the same origin twice is kept once.
  EXPECT_THAT(
      run_config({"--cors-origin", "http://localhost:3000", "--cors-origin=https://ui.example",
                  "--port", "1", "--cors-origin", "http://localhost:3000"})
          .cors_origins,
      ::testing::ElementsAre("http://localhost:3000", "https://ui.example"));
  // Each occurrence is checked on its own.
  EXPECT_THAT(error_of({"--cors-origin", "http://a.example", "--cors-origin", "*"}),
              HasSubstr("--cors-origin \"*\" is refused"));
}

TEST(ServerFlagsTest, CorsOriginIsWrittenAsABrowserSendsIt) {
  const auto origin = [](std::string_view value) {
    const std::vector<std::string> origins = run_config({"--cors-origin", value}).cors_origins;
    return origins.size() == 1 ? origins[0] : "";
  };
  EXPECT_EQ(origin("https://ui.example"), "https://ui.example");
  EXPECT_EQ(origin("http://127.0.0.1:5173"), "http://127.0.0.1:5173");
  EXPECT_EQ(origin("http://my_host.local:1"), "http://my_host.local:1");
  EXPECT_EQ(origin("http://localhost:65535"), "http://localhost:65535");
  // Scheme and host in lower case, the port in decimal, the scheme's default port left out.
  EXPECT_EQ(origin("HTTP://LocalHost:3000"), "http://localhost:3000");
  EXPECT_EQ(origin("http://localhost:80"), "http://localhost");
  EXPECT_EQ(origin("https://ui.example:443"), "https://ui.example");
  EXPECT_EQ(origin("http://ui.example:443"), "http://ui.example:443");
  EXPECT_EQ(origin("https://ui.example:80"), "https://ui.example:80");
  EXPECT_EQ(origin("http://localhost:0080"), "http://localhost");
  EXPECT_EQ(origin("http://localhost:03000"), "http://localhost:3000");
  // IPv6 in its canonical form: lower-case hex, no leading zeros, the first longest zero run.
  EXPECT_EQ(origin("http://[::1]:8080"), "http://[::1]:8080");
  EXPECT_EQ(origin("http://[0:0:0:0:0:0:0:1]"), "http://[::1]");
  EXPECT_EQ(origin("http://[FE80:0:0:0:1:0:0:0ABC]:3000"), "http://[fe80::1:0:0:abc]:3000");
  EXPECT_EQ(origin("http://[1:0:0:2:0:0:0:3]"), "http://[1:0:0:2::3]");
  EXPECT_EQ(origin("http://[1:0:2:3:4:5:6:7]"), "http://[1:0:2:3:4:5:6:7]");
  EXPECT_EQ(origin("http://[1::]"), "http://[1::]");
  EXPECT_EQ(origin("http://[::]"), "http://[::]");
}

TEST(ServerFlagsTest, EveryBadCorsOriginIsRefusedByName) {
  // Each message names the flag and the value, and says the rule.
  const std::vector<std::pair<std::string_view, std::string_view>> cases = {
      {"*", "is refused: name each origin"},
      {"null", "is refused: the opaque origin null"},
      {"localhost:3000", "must be scheme://host[:port]"},
      {"ui.example", "must be scheme://host[:port]"},
      {"ftp://ui.example", "must use the scheme http or https"},
      {"file://", "must use the scheme http or https"},
      {"://ui.example", "must use the scheme http or https"},
      {"http://", "has no host"},
      {"http://:3000", "has no host"},
      {"http://ui.example/", "must not end in a slash: a browser sends \"http://ui.example\""},
      {"http://localhost:3000/", "must not end in a slash"},
      {"http://ui.example/app", "must not hold a path"},
      {"http://ui.example//", "must not hold a path"},
      {"http://ui.example?x=1", "must not hold a query"},
      {"http://ui.example#top", "must not hold a fragment"},
      {"http://user@ui.example", "must not hold user information"},
      {"http://ui.example:", "must have a port between 1 and 65535"},
      {"http://ui.example:0", "must have a port between 1 and 65535"},
      {"http://ui.example:65536", "must have a port between 1 and 65535"},
      {"http://ui.example:99999999999", "must have a port between 1 and 65535"},
      {"http://ui.example:-1", "must have a port between 1 and 65535"},
      {"http://ui.example:+80", "must have a port between 1 and 65535"},
      {"http://ui.example:http", "must have a port between 1 and 65535"},
      {"http://ui.example:80:80", "must have a port between 1 and 65535"},
      {"http://ui example", "has a host a browser never sends"},
      {"http://bücher.example", "has a host a browser never sends"},
      {"http://ui.example\t", "has a host a browser never sends"},
      {" http://ui.example", "must use the scheme http or https"},
      {"http://[::1", "must have an IPv6 address in brackets"},
      {"http://[ui.example]", "must have an IPv6 address in brackets"},
      {"http://[fe80::1%eth0]", "must have an IPv6 address in brackets"},
      {"http://[::1]x", "must have nothing but :port after ]"},
      {"http://[::1]:", "must have a port between 1 and 65535"},
  };
  for (const auto& [value, rule] : cases) {
    const std::string message = error_of({"--cors-origin", value});
    EXPECT_THAT(message, StartsWith("--cors-origin ")) << value;
    EXPECT_THAT(message, HasSubstr(quote_for_log(value))) << value;
    EXPECT_THAT(message, HasSubstr(rule)) << value;
  }
  EXPECT_EQ(error_of({"--cors-origin="}), "--cors-origin must not be empty");
  EXPECT_EQ(error_of({"--cors-origin"}), "--cors-origin requires a value (ORIGIN)");
}

TEST(ServerFlagsTest, HelpSaysCorsOriginRepeatsAndRefusesTheWildcard) {
  // The help is wrapped to its columns: compared with every run of spaces and line breaks
  // read as one space.
  const std::string help = std::regex_replace(server_help_text(), std::regex("\\s+"), " ");
  EXPECT_THAT(help, HasSubstr("--cors-origin ORIGIN"));
  EXPECT_THAT(help, HasSubstr("repeat the flag for each origin"));
  EXPECT_THAT(help, HasSubstr("'*' is refused"));
  EXPECT_THAT(help, HasSubstr("(default: none: cross-origin writes are refused)"));
  EXPECT_THAT(help, HasSubstr("each --cors-origin adds an origin"));
}

TEST(ServerFlagsTest, ArgvOverload) {
  const char* argv[] = {"siesta-server", "--port", "0", "--backend=sim"};
  Result<ParsedFlags> parsed = parse_server_flags(4, argv);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->config.port, 0);
  EXPECT_EQ(parsed->config.backend, runtime::BackendKind::kSim);
}

}  // namespace
}  // namespace siesta::server
