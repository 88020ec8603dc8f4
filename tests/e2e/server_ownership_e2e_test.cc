// A conversation restores only its own snapshot, and is reached only by its own key: the real
// binary, tried as a client or an attacker with write access to the cache directory would.
//   - Two conversations (id_slot 0 and 1) over --parallel 2 --max-sessions 2, each offloaded
//     after every turn (POST /v1/cache/offload): their whole snapshots swapped, their deltas
//     swapped, one's chain copied under the other's name. Each is refused (`foreign`, the
//     prompt read again) and every answer, greedy and seeded-sampled at temperature 1.5,
//     equals a server's that never offloads.
//   - A slot export imported over a conversation whose snapshot chain is kept goes on as the
//     imported conversation (its history reused, its next slot save its own), not as a delta
//     of the one it replaced.
//   - A conversation opened with prompt_cache_key: id_slot does not reach it (409), nor does
//     prefix routing (a keyless prompt repeating its history reuses nothing); the operator's
//     /slots does. /slots/01 and /slots/%30 are not session numbers (400).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;

const std::vector<std::string> kTinyTwoSessions = {"--backend",      "sim",    "--model",
                                                   "synthetic:tiny", "--port", "0"};

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Conversations 0 and 1 on a server that offloads after every turn and on one that never
// offloads; every answer of the first must be the second's.
class TwoConversations {
 public:
  explicit TwoConversations(const std::vector<std::string>& extra = {}) {
    const std::vector<std::string> shared = with({"--parallel", "2"}, extra);
    server_ = start_or_die(
        with(with(kTinyTwoSessions, shared),
             {"--max-sessions", "2", "--cache-idle-seconds", "600", "--cache-ram-mib", "0",
              "--cache-disk-dir", cache_dir(), "--slot-save-path", temp_.file("slots")}));
    reference_ = start_or_die(
        with(with(kTinyTwoSessions, shared), {"--slot-save-path", temp_.file("reference-slots")}));
  }
  bool ok() const { return server_ != nullptr && reference_ != nullptr; }
  ServerProcess& server() { return *server_; }
  ServerProcess& reference() { return *reference_; }
  std::string cache_dir() const { return temp_.file("cache"); }
  std::string& history(int c) { return history_[c]; }

  // One turn of conversation `c` on both servers (greedy, or sampled at temperature 1.5 with
  // `seed`); the answers must be equal. Returns the offloading server's.
  Completion turn(int c, const std::string& words, int seed = -1) {
    const std::string prompt = history_[c] + words;
    json request = completion_request(prompt, 8);
    request["id_slot"] = c;
    if (seed >= 0) {
      request["temperature"] = 1.5;
      request["seed"] = seed;
    }
    Result<Completion> got = complete(*server_, request);
    Result<Completion> want = complete(*reference_, request);
    EXPECT_TRUE(got.ok() && want.ok());
    if (!got.ok() || !want.ok()) return {};
    EXPECT_EQ(got->http_status, 200) << got->body.dump();
    EXPECT_EQ(got->text, want->text) << "conversation " << c << (seed >= 0 ? ", sampled" : "");
    history_[c] = prompt + got->text;
    return *got;
  }

  // Offloads every conversation and waits until both are on disk.
  void offload_both() {
    httplib::Result offloaded = server_->post("/v1/cache/offload", "{}");
    ASSERT_TRUE(offloaded);
    ASSERT_EQ(offloaded->status, 200) << offloaded->body;
    Result<json> on_disk = server_->wait_for_status(
        [](const json& status) {
          const json& sessions = status["cache"]["sessions"];
          if (sessions.size() != 2) return false;
          for (const json& s : sessions) {
            if (s["state"] != "disk") return false;
          }
          return true;
        },
        "both conversations on disk");
    ASSERT_TRUE(on_disk.ok()) << on_disk.status().to_string();
  }

  // The snapshot file of conversation `c`, segment `segment` (0: the whole one).
  std::string snapshot(int c, int segment = 0) const {
    const std::regex name("siesta-[0-9a-f]{32}-" + std::to_string(c) +
                          (segment == 0 ? std::string() : "\\." + std::to_string(segment)) +
                          "\\.snap");
    for (const std::string& file : list_dir(cache_dir())) {
      if (std::regex_match(file, name)) return cache_dir() + "/" + file;
    }
    ADD_FAILURE() << "no snapshot of conversation " << c << " segment " << segment;
    return cache_dir() + "/missing";
  }

  int64_t foreign_fallbacks() {
    Result<json> status = server_->status();
    return status.ok() ? cache_counter(*status, "fallbacks", "foreign") : -1;
  }

  // Both conversations get two turns, offloaded after each.
  void two_turns_each() {
    for (const char* words : {"The first user's secret plan", " and more of it"}) {
      turn(0, words);
      turn(1, std::string(words) + " from someone else");
      offload_both();
    }
  }

  // The next turns of conversation `c` (sampled, then greedy) after its files were tampered
  // with: refused as foreign, read from the start, the reference's answers.
  void expect_refused_then_right(int c) {
    const int64_t before = foreign_fallbacks();
    const Completion sampled = turn(c, " -- what next?", 7 + c);
    EXPECT_EQ(sampled.cached_tokens, 0) << "conversation " << c << " restored another's file";
    EXPECT_EQ(foreign_fallbacks(), before + 1);
    const Completion greedy = turn(c, " and then?");
    EXPECT_GT(greedy.cached_tokens, 0) << "the conversation goes on from its reread history";
  }

 private:
  TempDir temp_;
  std::unique_ptr<ServerProcess> server_;
  std::unique_ptr<ServerProcess> reference_;
  std::string history_[2];
};

TEST(ServerOwnershipE2eTest, WholeSnapshotsSwappedBetweenConversationsAreRefused) {
  TwoConversations two({"--cache-delta-saves", "0"});
  ASSERT_TRUE(two.ok());
  two.two_turns_each();
  // Injected: conversation 0's snapshot and conversation 1's swapped.
  const std::vector<char> zero = read_bytes(two.snapshot(0));
  write_bytes(two.snapshot(0), read_bytes(two.snapshot(1)));
  write_bytes(two.snapshot(1), zero);
  two.expect_refused_then_right(0);
  two.expect_refused_then_right(1);
}

TEST(ServerOwnershipE2eTest, DeltasSwappedBetweenConversationsAreRefused) {
  TwoConversations two;
  ASSERT_TRUE(two.ok());
  two.two_turns_each();
  // Injected: the two conversations' first deltas swapped (both their second save).
  const std::vector<char> zero = read_bytes(two.snapshot(0, 1));
  write_bytes(two.snapshot(0, 1), read_bytes(two.snapshot(1, 1)));
  write_bytes(two.snapshot(1, 1), zero);
  two.expect_refused_then_right(0);
  two.expect_refused_then_right(1);
}

TEST(ServerOwnershipE2eTest, OneConversationsChainUnderTheOthersNameIsRefused) {
  TwoConversations two;
  ASSERT_TRUE(two.ok());
  two.two_turns_each();
  // Injected: conversation 1's whole chain, base and delta, over conversation 0's.
  write_bytes(two.snapshot(0), read_bytes(two.snapshot(1)));
  write_bytes(two.snapshot(0, 1), read_bytes(two.snapshot(1, 1)));
  two.expect_refused_then_right(0);
  const Completion own = two.turn(1, " -- still mine");
  EXPECT_GT(own.cached_tokens, 0) << "conversation 1's own chain restores";
}

TEST(ServerOwnershipE2eTest, AnImportOverAKeptChainGoesOnAsTheImportedConversation) {
  TwoConversations two;
  ASSERT_TRUE(two.ok());
  two.turn(0, "The conversation that is saved to a slot file");
  for (ServerProcess* s : {&two.server(), &two.reference()}) {
    httplib::Result saved = s->post_json("/slots/0?action=save", {{"filename", "exported"}});
    ASSERT_TRUE(saved);
    ASSERT_EQ(saved->status, 200) << saved->body;
  }
  two.turn(1, "The conversation it replaces, kept on disk as a chain");
  two.offload_both();
  two.turn(1, " and restored once");  // its chain stays as the base of the next delta

  for (ServerProcess* s : {&two.server(), &two.reference()}) {
    httplib::Result restored = s->post_json("/slots/1?action=restore", {{"filename", "exported"}});
    ASSERT_TRUE(restored);
    ASSERT_EQ(restored->status, 200) << restored->body;
  }
  two.history(1) = two.history(0);
  two.turn(1, " continued after the import");
  two.offload_both();
  const auto kept = static_cast<int64_t>(two.history(1).size());
  const Completion back = two.turn(1, " and back from disk");
  EXPECT_EQ(back.cached_tokens, kept - 1) << "the imported conversation's history comes back";

  // A slot save of it now holds the imported conversation: restored into slot 0 on both
  // servers, it goes on the same.
  for (ServerProcess* s : {&two.server(), &two.reference()}) {
    httplib::Result saved = s->post_json("/slots/1?action=save", {{"filename", "after"}});
    ASSERT_TRUE(saved);
    ASSERT_EQ(saved->status, 200) << saved->body;
    httplib::Result restored = s->post_json("/slots/0?action=restore", {{"filename", "after"}});
    ASSERT_TRUE(restored);
    ASSERT_EQ(restored->status, 200) << restored->body;
  }
  two.history(0) = two.history(1);
  const Completion again = two.turn(0, " -- from the second slot file", 11);
  EXPECT_GT(again.cached_tokens, 0);
}

TEST(ServerOwnershipE2eTest, AKeyedConversationIsReachedOnlyWithItsKey) {
  auto server = start_or_die(with(kTinyTwoSessions, {"--parallel", "2", "--max-sessions", "2"}));
  ASSERT_NE(server, nullptr);
  const std::string secret = "A private history that another client tries to probe";
  json keyed = completion_request(secret, 8);
  keyed["prompt_cache_key"] = "the-owners-key";
  Result<Completion> first = complete(*server, keyed);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->http_status, 200) << first->body.dump();
  const std::string history = secret + first->text;
  // The first conversation opened takes the first session number.
  const int keyed_slot = 0;
  Result<json> status = server->status();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ((*status)["cache"]["sessions"].size(), 1u) << status->dump();
  ASSERT_EQ((*status)["cache"]["sessions"][0]["id"], keyed_slot) << status->dump();

  // id_slot does not reach it.
  json by_slot = completion_request(history + " continued", 8);
  by_slot["id_slot"] = keyed_slot;
  Result<Completion> refused = complete(*server, by_slot);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->http_status, 409) << refused->body.dump();
  EXPECT_THAT(refused->body.dump(), ::testing::HasSubstr("prompt_cache_key"));
  EXPECT_THAT(refused->body.dump(), ::testing::Not(::testing::HasSubstr("private")));

  // Nor does a keyless prompt that repeats its history (prefix routing).
  Result<Completion> probe = complete(*server, completion_request(history + " continued", 8));
  ASSERT_TRUE(probe.ok());
  ASSERT_EQ(probe->http_status, 200) << probe->body.dump();
  EXPECT_EQ(probe->cached_tokens, 0) << "a keyless prompt reused a keyed conversation's history";

  // Its key does.
  keyed["prompt"] = history + " continued";
  Result<Completion> owner = complete(*server, keyed);
  ASSERT_TRUE(owner.ok());
  EXPECT_EQ(owner->cached_tokens, static_cast<int64_t>(history.size()) - 1);

  // Slot numbers are decimal as written.
  for (const std::string path : {"/slots/01?action=erase", "/slots/%30?action=erase",
                                 "/slots/2?action=erase", "/slots/-1?action=erase"}) {
    httplib::Result bad = server->post(path, "{}");
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << path << ": " << bad->body;
  }
  // The operator's tool reaches it: erase by slot.
  httplib::Result erased =
      server->post("/slots/" + std::to_string(keyed_slot) + "?action=erase", "{}");
  ASSERT_TRUE(erased);
  EXPECT_EQ(erased->status, 200) << erased->body;
}

TEST(ServerOwnershipE2eTest, WithOneConversationAKeylessPromptDoesNotReachAKeyedOne) {
  auto server = start_or_die(kTinyTwoSessions);
  ASSERT_NE(server, nullptr);
  const std::string secret = "The only conversation, opened with a key";
  json keyed = completion_request(secret, 8);
  keyed["prompt_cache_key"] = "the-owners-key";
  Result<Completion> first = complete(*server, keyed);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->http_status, 200);
  Result<Completion> probe = complete(*server, completion_request(secret + first->text, 8));
  ASSERT_TRUE(probe.ok());
  ASSERT_EQ(probe->http_status, 200) << probe->body.dump();
  EXPECT_EQ(probe->cached_tokens, 0) << "a keyless prompt reused a keyed conversation's history";
}

}  // namespace
}  // namespace siesta::testing
