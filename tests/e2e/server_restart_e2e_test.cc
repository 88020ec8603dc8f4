// Conversations that survive a restart, with the real binary (--cache-persist on,
// docs/IDLE_SESSION.md "Conversations across a restart"): a conversation, SIGTERM, a restart
// with the same key file: the next turn reuses the history (cached_tokens) and answers as a
// server that never stopped; after kill -9 what was saved survives and what was not is read
// again; another model context, KV type or key file adopts nothing and answers right; a
// damaged snapshot falls back; a live server's snapshots are never another's; a key file or a
// combination of flags that cannot be trusted is refused with exit 2 and one line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::vector<std::string> kPersistModel = {"--backend", "sim", "--model", "synthetic:small"};
constexpr const char* kRestartPrompt =
    "Persistence: a conversation that outlives the server that held it, word for word. ";

// A persisting server's flags on `dir` with the key file `key` (RAM tier off: a saved
// conversation is a file, so kill -9 keeps exactly what was saved).
std::vector<std::string> persist_args(const std::string& dir, const std::string& key) {
  return with(kPersistModel,
              {"--cache-idle-seconds", "600", "--cache-disk-dir", dir, "--cache-ram-mib", "0",
               "--cache-persist", "on", "--cache-key-file", key});
}

json keyed(json request, const std::string& key) {
  request["prompt_cache_key"] = key;
  return request;
}

json first_turn() { return completion_request(kRestartPrompt, 8); }
json second_turn(const Completion& first) {
  return completion_request(std::string(kRestartPrompt) + first.text + " And after the restart?",
                            8);
}

// The persistence block of /v1/status.
json persistence(const ServerProcess& server) {
  Result<json> status = server.status();
  EXPECT_TRUE(status.ok()) << status.status().to_string();
  return status.ok() ? (*status)["cache"]["persistence"] : json();
}

// A server that never stops: the answers every restarted one must give.
struct Reference {
  std::unique_ptr<ServerProcess> server = start_or_die(kPersistModel);
  Completion first;
  Completion second;
  Reference() {
    if (server == nullptr) return;
    Result<Completion> one = complete(*server, first_turn());
    EXPECT_TRUE(one.ok()) << one.status().to_string();
    if (!one.ok()) return;
    first = *one;
    Result<Completion> two = complete(*server, second_turn(first));
    EXPECT_TRUE(two.ok()) << two.status().to_string();
    if (two.ok()) second = *two;
  }
};

TEST(ServerRestartE2eTest, AConversationSurvivesACleanStopAndComesBackWithItsHistory) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string key = temp.file("key");
  Reference reference;
  ASSERT_GT(reference.second.cached_tokens, 0);

  auto before = start_or_die(persist_args(dir, key));
  ASSERT_NE(before, nullptr);
  EXPECT_THAT(before->stderr_text(), HasSubstr("created the snapshot key file"));
  struct stat key_stat {};
  ASSERT_EQ(::stat(key.c_str(), &key_stat), 0);
  EXPECT_EQ(key_stat.st_mode & 0777, 0600u);
  EXPECT_EQ(key_stat.st_size, 32);
  Result<Completion> first = complete(*before, keyed(first_turn(), "alice"));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->text, reference.first.text);
  expect_clean_exit(*before);  // resident at the signal: saved on the way out
  EXPECT_THAT(before->stderr_text(), HasSubstr("exit: 1 conversations saved"));
  EXPECT_THAT(list_dir(dir), ::testing::Contains(::testing::EndsWith(".snap")));

  auto after = start_or_die(persist_args(dir, key));
  ASSERT_NE(after, nullptr);
  EXPECT_THAT(after->stderr_text(), ::testing::Not(HasSubstr("created the snapshot key file")));
  const json adopted = persistence(*after);
  EXPECT_EQ(adopted.value("enabled", false), true) << adopted.dump();
  EXPECT_EQ(adopted.value("adopted", -1), 1) << adopted.dump();
  Result<json> asleep = after->wait_for_cache_state("disk");
  ASSERT_TRUE(asleep.ok()) << asleep.status().to_string();

  Result<Completion> second = complete(*after, keyed(second_turn(*first), "alice"));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->text, reference.second.text);
  EXPECT_EQ(second->cached_tokens, reference.second.cached_tokens) << second->body.dump();
  Result<json> awake = after->status();
  ASSERT_TRUE(awake.ok());
  EXPECT_EQ(cache_counter(*awake, "restore_hits"), 1) << awake->dump();
  // The key never shows: not in the log, not in the status.
  EXPECT_THAT(after->stderr_text(), ::testing::Not(HasSubstr("alice")));
  EXPECT_THAT(awake->dump(), ::testing::Not(HasSubstr("alice")));
}

TEST(ServerRestartE2eTest, ARestartRoutesBySlotAndByPrefixAsBefore) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string key = temp.file("key");
  Reference reference;
  const std::vector<std::string> args = with(persist_args(dir, key), {"--max-sessions", "4"});
  auto before = start_or_die(args);
  ASSERT_NE(before, nullptr);
  json by_slot = first_turn();
  by_slot["id_slot"] = 3;
  Result<Completion> slotted = complete(*before, by_slot);
  ASSERT_TRUE(slotted.ok()) << slotted.status().to_string();
  expect_clean_exit(*before);

  auto after = start_or_die(args);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(persistence(*after).value("adopted", -1), 1);
  // By prefix: no key, no slot, the prompt continues the adopted history.
  Result<Completion> prefix = complete(*after, second_turn(*slotted));
  ASSERT_TRUE(prefix.ok()) << prefix.status().to_string();
  EXPECT_EQ(prefix->text, reference.second.text);
  EXPECT_EQ(prefix->cached_tokens, reference.second.cached_tokens) << prefix->body.dump();
  Result<json> status = after->status();
  ASSERT_TRUE(status.ok());
  bool restored_three = false;
  for (const json& session : (*status)["cache"]["sessions"]) {
    if (session.value("id", -1) == 3) restored_three = session.value("restores", 0) == 1;
  }
  EXPECT_TRUE(restored_three) << "conversation 3 came back as 3: " << status->dump();
}

TEST(ServerRestartE2eTest, AfterKillNineWhatWasSavedSurvivesAndWhatWasNotIsReadAgain) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string key = temp.file("key");
  Reference reference;
  const std::vector<std::string> args = with(persist_args(dir, key), {"--max-sessions", "4"});
  auto before = start_or_die(args);
  ASSERT_NE(before, nullptr);
  Result<Completion> saved = complete(*before, keyed(first_turn(), "saved"));
  ASSERT_TRUE(saved.ok()) << saved.status().to_string();
  ASSERT_TRUE(before->post("/v1/cache/offload", ""));
  Result<json> on_disk = before->wait_for_status(
      [](const json& status) {
        for (const json& session : status["cache"].value("sessions", json::array())) {
          if (session.value("state", "") != "disk") return false;
        }
        return true;
      },
      "every conversation on disk");
  ASSERT_TRUE(on_disk.ok()) << on_disk.status().to_string();
  Result<Completion> unsaved = complete(*before, keyed(first_turn(), "unsaved"));
  ASSERT_TRUE(unsaved.ok()) << unsaved.status().to_string();
  Result<ProcessExit> killed = before->kill_hard();
  ASSERT_TRUE(killed.ok()) << killed.status().to_string();

  auto after = start_or_die(args);
  ASSERT_NE(after, nullptr);
  EXPECT_EQ(persistence(*after).value("adopted", -1), 1) << persistence(*after).dump();
  Result<Completion> kept = complete(*after, keyed(second_turn(*saved), "saved"));
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_EQ(kept->text, reference.second.text);
  EXPECT_EQ(kept->cached_tokens, reference.second.cached_tokens);
  Result<Completion> lost = complete(*after, keyed(second_turn(*unsaved), "unsaved"));
  ASSERT_TRUE(lost.ok()) << lost.status().to_string();
  EXPECT_EQ(lost->text, reference.second.text);
  EXPECT_EQ(lost->cached_tokens, 0) << "never saved: read again";
}

// Stops a persisting server after one keyed turn; returns its first answer.
Completion one_turn_then_stop(const std::vector<std::string>& args) {
  auto server = start_or_die(args);
  if (server == nullptr) return {};
  Result<Completion> first = complete(*server, keyed(first_turn(), "alice"));
  EXPECT_TRUE(first.ok()) << first.status().to_string();
  expect_clean_exit(*server);
  return first.ok() ? *first : Completion{};
}

TEST(ServerRestartE2eTest, AnotherContextKvTypeOrKeyAdoptsNothingAndAnswersRight) {
  struct Change {
    std::vector<std::string> extra;
    bool other_key;
    const char* refused;
  };
  const std::vector<Change> changes = {{{"--model", "synthetic:tiny"}, false, "foreign"},
                                       {{"--ctx", "1024"}, false, "foreign"},
                                       {{"--kv-type", "f32"}, false, "foreign"},
                                       {{}, true, "unreadable"}};
  for (const Change& change : changes) {
    SCOPED_TRACE(change.refused + std::string(change.other_key ? " (another key file)" : ""));
    TempDir temp;
    const std::string dir = temp.file("cache");
    const Completion first = one_turn_then_stop(persist_args(dir, temp.file("key")));
    const std::string key = change.other_key ? temp.file("other-key") : temp.file("key");
    const std::vector<std::string> changed = with(persist_args(dir, key), change.extra);
    auto after = start_or_die(changed);
    ASSERT_NE(after, nullptr);
    const json adopted = persistence(*after);
    EXPECT_EQ(adopted.value("adopted", -1), 0) << adopted.dump();
    EXPECT_EQ(adopted["refused"].value(change.refused, -1), 1) << adopted.dump();
    EXPECT_EQ(snapshot_files(dir), std::vector<std::string>{}) << "refused files are removed";
    auto reference = start_or_die(with(kPersistModel, change.extra));
    ASSERT_NE(reference, nullptr);
    Result<Completion> ref_first = complete(*reference, first_turn());
    ASSERT_TRUE(ref_first.ok());
    Result<Completion> expected = complete(
        *reference, completion_request(
                        std::string(kRestartPrompt) + first.text + " And after the restart?", 8));
    ASSERT_TRUE(expected.ok());
    Result<Completion> second = complete(*after, keyed(second_turn(first), "alice"));
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    EXPECT_EQ(second->cached_tokens, 0) << second->body.dump();
    EXPECT_EQ(second->text, expected->text);
  }
}

// The one snapshot file in `dir` (its full path); empty when there is not exactly one.
std::string only_snapshot(const std::string& dir) {
  std::vector<std::string> snaps;
  for (const std::string& name : list_dir(dir)) {
    if (name.ends_with(".snap")) snaps.push_back(name);
  }
  return snaps.size() == 1 ? dir + "/" + snaps[0] : "";
}

TEST(ServerRestartE2eTest, ADamagedOrTruncatedSnapshotFallsBackWithTheRightAnswer) {
  for (const bool truncate : {false, true}) {
    SCOPED_TRACE(truncate ? "fault: the file cut short" : "fault: a byte flipped near its end");
    TempDir temp;
    const std::string dir = temp.file("cache");
    const std::string key = temp.file("key");
    Reference reference;
    const Completion first = one_turn_then_stop(persist_args(dir, key));
    const std::string file = only_snapshot(dir);
    ASSERT_FALSE(file.empty()) << ::testing::PrintToString(list_dir(dir));
    struct stat st {};
    ASSERT_EQ(::stat(file.c_str(), &st), 0);
    if (truncate) {
      ASSERT_EQ(::truncate(file.c_str(), st.st_size - 100), 0);
    } else {
      std::fstream bytes(file, std::ios::in | std::ios::out | std::ios::binary);
      bytes.seekg(st.st_size - 200);
      const char was = static_cast<char>(bytes.get());
      bytes.seekp(st.st_size - 200);
      bytes.put(static_cast<char>(was ^ 0x40));
      ASSERT_TRUE(bytes.good());
    }
    auto after = start_or_die(persist_args(dir, key));
    ASSERT_NE(after, nullptr);
    Result<Completion> second = complete(*after, keyed(second_turn(first), "alice"));
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    EXPECT_EQ(second->text, reference.second.text);
    EXPECT_EQ(second->cached_tokens, 0) << second->body.dump();
    const json adopted = persistence(*after);
    if (truncate) {
      EXPECT_EQ(adopted["refused"].value("unreadable", -1), 1) << adopted.dump();
    } else {
      // The header is whole, so it is adopted; its damaged chunk is found when it is read.
      Result<json> status = after->status();
      ASSERT_TRUE(status.ok());
      EXPECT_EQ(cache_counter(*status, "fallbacks", "corrupt"), 1) << status->dump();
    }
  }
}

TEST(ServerRestartE2eTest, TwoConversationsFilesSwappedAreRefusedAndBothAnswerRight) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string key = temp.file("key");
  Reference reference;
  const std::vector<std::string> args = with(persist_args(dir, key), {"--max-sessions", "4"});
  Completion first;
  {
    auto before = start_or_die(args);
    ASSERT_NE(before, nullptr);
    for (const char* user : {"alice", "bob"}) {
      Result<Completion> one = complete(*before, keyed(first_turn(), user));
      ASSERT_TRUE(one.ok()) << one.status().to_string();
      first = *one;
    }
    expect_clean_exit(*before);
  }
  std::vector<std::string> snaps;
  for (const std::string& name : list_dir(dir)) {
    if (name.ends_with(".snap")) snaps.push_back(dir + "/" + name);
  }
  ASSERT_EQ(snaps.size(), 2u) << ::testing::PrintToString(list_dir(dir));
  // The fault: each conversation's file put under the other's name.
  ASSERT_EQ(::rename(snaps[0].c_str(), (dir + "/aside").c_str()), 0);
  ASSERT_EQ(::rename(snaps[1].c_str(), snaps[0].c_str()), 0);
  ASSERT_EQ(::rename((dir + "/aside").c_str(), snaps[1].c_str()), 0);

  auto after = start_or_die(args);
  ASSERT_NE(after, nullptr);
  const json adopted = persistence(*after);
  EXPECT_EQ(adopted.value("adopted", -1), 0) << adopted.dump();
  EXPECT_EQ(adopted["refused"].value("foreign", -1), 2) << adopted.dump();
  for (const char* user : {"alice", "bob"}) {
    Result<Completion> second = complete(*after, keyed(second_turn(first), user));
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    EXPECT_EQ(second->text, reference.second.text) << user;
    EXPECT_EQ(second->cached_tokens, 0) << user;
  }
}

// A cache adopted across a change of the slot count answered with another slot's history in
// one llama.cpp fork; here a number the new count does not keep is refused, never renumbered.
TEST(ServerRestartE2eTest, ARestartKeepingFewerConversationsRefusesTheNumbersBeyondIt) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string key = temp.file("key");
  Reference reference;
  Completion first;
  {
    auto before = start_or_die(with(persist_args(dir, key), {"--max-sessions", "4"}));
    ASSERT_NE(before, nullptr);
    json by_slot = first_turn();
    by_slot["id_slot"] = 3;
    Result<Completion> one = complete(*before, by_slot);
    ASSERT_TRUE(one.ok()) << one.status().to_string();
    first = *one;
    expect_clean_exit(*before);
  }
  auto after = start_or_die(with(persist_args(dir, key), {"--max-sessions", "2"}));
  ASSERT_NE(after, nullptr);
  const json adopted = persistence(*after);
  EXPECT_EQ(adopted.value("adopted", -1), 0) << adopted.dump();
  EXPECT_EQ(adopted["refused"].value("no_room", -1), 1) << adopted.dump();
  Result<Completion> second = complete(*after, second_turn(first));
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(second->text, reference.second.text);
  EXPECT_EQ(second->cached_tokens, 0);
}

TEST(ServerRestartE2eTest, ALiveServersSnapshotsAreNeverAdopted) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string key = temp.file("key");
  Reference reference;
  auto first = start_or_die(persist_args(dir, key));
  ASSERT_NE(first, nullptr);
  Result<Completion> one = complete(*first, keyed(first_turn(), "alice"));
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  ASSERT_TRUE(first->post("/v1/cache/offload", ""));
  ASSERT_TRUE(first->wait_for_cache_state("disk").ok());
  auto second = start_or_die(persist_args(dir, key));
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(persistence(*second).value("offered", -1), 0) << "its owner's lock is held";
  // The live server's conversation is still its own, whole.
  Result<Completion> two = complete(*first, keyed(second_turn(*one), "alice"));
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->text, reference.second.text);
  EXPECT_EQ(two->cached_tokens, reference.second.cached_tokens);
  expect_clean_exit(*second);
  expect_clean_exit(*first);
}

TEST(ServerRestartE2eTest, AKeyFileThatCannotBeTrustedIsRefusedWithOneLine) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  struct Bad {
    const char* what;
    std::string path;
  };
  const std::string good = temp.file("good-key");
  {
    std::ofstream out(good, std::ios::binary);
    out << std::string(32, 'k');
  }
  ASSERT_EQ(::chmod(good.c_str(), 0600), 0);
  const std::string open_to_all = temp.file("open-key");
  {
    std::ofstream out(open_to_all, std::ios::binary);
    out << std::string(32, 'k');
  }
  ASSERT_EQ(::chmod(open_to_all.c_str(), 0644), 0);
  const std::string link = temp.file("link-key");
  ASSERT_EQ(::symlink(good.c_str(), link.c_str()), 0);
  const std::string directory = temp.file("dir-key");
  ASSERT_EQ(::mkdir(directory.c_str(), 0700), 0);
  const std::string short_key = temp.file("short-key");
  {
    std::ofstream out(short_key, std::ios::binary);
    out << std::string(31, 'k');
  }
  ASSERT_EQ(::chmod(short_key.c_str(), 0600), 0);
  for (const Bad& bad : std::vector<Bad>{{"mode 0644", open_to_all},
                                         {"a symlink", link},
                                         {"a directory", directory},
                                         {"the wrong size", short_key}}) {
    SCOPED_TRACE(bad.what);
    Result<ProcessExit> exit =
        ServerProcess::run_to_exit(with({"--port", "0"}, persist_args(dir, bad.path)));
    ASSERT_TRUE(exit.ok()) << exit.status().to_string();
    EXPECT_EQ(exit->exit_code, 2) << exit->describe();
    EXPECT_THAT(exit->stderr_text, HasSubstr("--cache-key-file: "));
    EXPECT_THAT(exit->stderr_text, ::testing::Not(HasSubstr("kkkk")));
  }
}

TEST(ServerRestartE2eTest, PersistenceFlagsThatCannotWorkTogetherAreRefused) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string key = temp.file("key");
  struct Bad {
    std::vector<std::string> args;
    const char* message;
  };
  const std::vector<Bad> bads = {
      {with(kPersistModel, {"--cache-persist", "on", "--cache-key-file", key}),
       "needs idle offload"},
      {with(kPersistModel,
            {"--cache-idle-seconds", "60", "--cache-disk-dir", dir, "--cache-persist", "on"}),
       "needs --cache-key-file"},
      {with(kPersistModel, {"--cache-key-file", key}), "only with --cache-persist on"},
      {with(persist_args(dir, key), {"--cache-encrypt", "off"}), "needs --cache-encrypt on"},
      {with(persist_args(dir, key), {"--cache-exit-save-seconds", "-1"}),
       "--cache-exit-save-seconds"},
  };
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.message);
    Result<ProcessExit> exit = ServerProcess::run_to_exit(bad.args);
    ASSERT_TRUE(exit.ok()) << exit.status().to_string();
    EXPECT_EQ(exit->exit_code, 2) << exit->describe();
    EXPECT_THAT(exit->stderr_text, HasSubstr(bad.message));
  }
  EXPECT_EQ(list_dir(temp.path()), std::vector<std::string>{}) << "nothing made";
}

}  // namespace
}  // namespace siesta::testing
