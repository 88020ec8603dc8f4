// A hostile directory under the real binary: files put where the server reads snapshots and
// slot files, while it runs.
//   - a FIFO in place of the session's snapshot: the restore blocked in open() for ever
//     (state "restoring", every request hanging, SIGTERM ignored); now it falls back at once,
//     the answer is a server's that never offloaded, /health answers, SIGTERM stops it;
//   - a FIFO as a slot file: the same wedge through POST /slots/0?action=restore; now a 400;
//   - an older snapshot of the same process and session put back (a replay): it was restored;
//     now it falls back (foreign), with a fresh server's answer;
//   - damaged, cut, foreign, other-version and non-regular slot files: they were 500/501
//     server_error naming the server's absolute path; now the client's 400 (also for a missing
//     one) naming only the file name the client sent.
//
// Answers are compared with a second server started with offload off and fed the same
// requests (greedy generation is deterministic). The session sleeps only when the test says
// so (POST /v1/cache/offload; the idle timer is 600 s), so no test waits on a timer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
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
using ::testing::Not;
using ::testing::SizeIs;

const std::vector<std::string> kFilesModel = {"--backend",      "sim",   "--model",
                                              "synthetic:tiny", "--ctx", "1024"};

// The offloading server (sleeping only when told) and its offload-off twin.
struct TwinServers {
  std::unique_ptr<ServerProcess> offload;
  std::unique_ptr<ServerProcess> reference;
  bool ok() const { return offload != nullptr && reference != nullptr; }
};

TwinServers start_twins(const std::string& cache_dir, const std::vector<std::string>& more = {}) {
  // One conversation (--max-sessions 1): every request continues or replaces the one snapshot
  // these tests tamper with.
  return {
      start_or_die(with(kFilesModel, with({"--cache-idle-seconds", "600", "--cache-expire-seconds",
                                           "1200", "--cache-ram-mib", "0", "--max-sessions", "1",
                                           "--cache-disk-dir", cache_dir},
                                          more))),
      start_or_die(kFilesModel)};
}

// Both servers answer `request` with 200 and the same text; the offloading one's answer.
Completion both_answer(const TwinServers& servers, const json& request, const std::string& what) {
  Result<Completion> got = complete(*servers.offload, request);
  Result<Completion> want = complete(*servers.reference, request);
  EXPECT_TRUE(got.ok()) << what << ": " << got.status().to_string() << "\nserver stderr:\n"
                        << servers.offload->stderr_text();
  EXPECT_TRUE(want.ok()) << what << ": " << want.status().to_string();
  if (!got.ok() || !want.ok()) return {};
  EXPECT_EQ(got->http_status, 200) << what << ": " << got->body.dump();
  EXPECT_EQ(got->text, want->text) << what << ": offload on and off disagree";
  return *got;
}

// Puts the session to sleep now and waits for the snapshot; returns its path ("" on failure).
std::string offload_now(const ServerProcess& server, const std::string& dir) {
  httplib::Result offload = server.post("/v1/cache/offload", "");
  EXPECT_TRUE(offload) << httplib::to_string(offload.error());
  if (!offload) return "";
  Result<json> asleep = server.wait_for_cache_state("disk");
  EXPECT_TRUE(asleep.ok()) << asleep.status().to_string();
  const std::vector<std::string> names = snapshot_files(dir);
  EXPECT_THAT(names, SizeIs(1)) << ::testing::PrintToString(list_dir(dir));
  return names.size() == 1 ? dir + "/" + names[0] : "";
}

void expect_healthy(const ServerProcess& server) {
  httplib::Result health = server.get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200) << health->body;
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

const std::string kFilesFirst = "The sleeping session remembers this opening line.";

TEST(ServerFilesE2eTest, AFifoInPlaceOfTheSnapshotFallsBackAndTheServerStaysResponsive) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  TwinServers servers = start_twins(dir);
  ASSERT_TRUE(servers.ok());
  const Completion first = both_answer(servers, completion_request(kFilesFirst, 16), "first");
  const std::string snapshot = offload_now(*servers.offload, dir);
  ASSERT_FALSE(snapshot.empty());

  // Injected: the snapshot replaced by a FIFO while the session sleeps.
  ASSERT_EQ(::unlink(snapshot.c_str()), 0);
  ASSERT_EQ(::mkfifo(snapshot.c_str(), 0600), 0);

  const Completion after = both_answer(
      servers, completion_request(kFilesFirst + first.text + " Then:", 16), "after the FIFO");
  EXPECT_EQ(after.cached_tokens, 0) << after.body.dump();
  expect_healthy(*servers.offload);
  Result<json> status = servers.offload->status();
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  EXPECT_EQ(status->at("cache").value("state", ""), "resident") << status->dump();
  EXPECT_EQ(cache_counter(*status, "fallbacks", "io_error"), 1) << status->dump();
  EXPECT_THAT(servers.offload->stderr_text(), HasSubstr("not a regular file"));
  // Still a working session: another completion, and a stop on SIGTERM.
  both_answer(servers, completion_request("A second, unrelated question?", 16),
              "after the fallback");
  expect_clean_exit(*servers.offload);
}

TEST(ServerFilesE2eTest, AFifoAsASlotFileIsA400AndTheServerStaysResponsive) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string slots = temp.file("slots");
  TwinServers servers = start_twins(dir, {"--slot-save-path", slots});
  ASSERT_TRUE(servers.ok());
  const Completion first = both_answer(servers, completion_request(kFilesFirst, 16), "first");
  ASSERT_TRUE(std::filesystem::is_directory(slots));
  ASSERT_EQ(::mkfifo((slots + "/fifo").c_str(), 0600), 0);  // injected: a FIFO as a slot file

  httplib::Result restored =
      servers.offload->post_json("/slots/0?action=restore", {{"filename", "fifo"}});
  ASSERT_TRUE(restored) << httplib::to_string(restored.error());
  EXPECT_EQ(restored->status, 400) << restored->body;
  EXPECT_THAT(restored->body, Not(HasSubstr(slots))) << "the server's path is not the client's";
  EXPECT_THAT(restored->body, HasSubstr("\\\"fifo\\\"")) << restored->body;
  expect_healthy(*servers.offload);
  const Completion after = both_answer(
      servers, completion_request(kFilesFirst + first.text + " More:", 16), "after the FIFO");
  EXPECT_GT(after.cached_tokens, 0) << "the refused restore changed nothing";
  expect_clean_exit(*servers.offload);
}

TEST(ServerFilesE2eTest, AReplayedOlderSnapshotFallsBackWithAFreshServersAnswer) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  TwinServers servers = start_twins(dir);
  ASSERT_TRUE(servers.ok());
  const Completion first = both_answer(servers, completion_request(kFilesFirst, 16), "first");
  const std::string snapshot = offload_now(*servers.offload, dir);
  ASSERT_FALSE(snapshot.empty());
  const std::vector<char> older = read_bytes(snapshot);  // copied aside

  // A command (another conversation: restored, then saved again).
  const Completion other =
      both_answer(servers, completion_request("Another conversation entirely.", 16), "other");
  EXPECT_EQ(offload_now(*servers.offload, dir), snapshot) << "the same name, a newer file";

  // Injected: the older copy put back in place.
  write_bytes(snapshot, older);
  const json request = completion_request(kFilesFirst + first.text + " Resume:", 16);
  const Completion after = both_answer(servers, request, "after the replay");
  EXPECT_EQ(after.cached_tokens, 0) << "the replayed history was reused: " << after.body.dump();
  std::unique_ptr<ServerProcess> fresh =
      start_or_die(kFilesModel);  // never offloaded, never saw it
  ASSERT_NE(fresh, nullptr);
  Result<Completion> cold = complete(*fresh, request);
  ASSERT_TRUE(cold.ok()) << cold.status().to_string();
  EXPECT_EQ(after.text, cold->text);
  Result<json> status = servers.offload->status();
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  EXPECT_EQ(cache_counter(*status, "fallbacks", "foreign"), 1) << status->dump();
  EXPECT_EQ(cache_counter(*status, "restore_hits"), 1) << "only the genuine wake" << status->dump();
  (void)other;
  expect_clean_exit(*servers.offload);
}

TEST(ServerFilesE2eTest, DamagedForeignAndNonRegularSlotFilesAreTheClients400) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string slots = temp.file("slots");
  TwinServers servers = start_twins(dir, {"--slot-save-path", slots});
  ASSERT_TRUE(servers.ok());
  both_answer(servers, completion_request(kFilesFirst, 16), "first");
  httplib::Result saved =
      servers.offload->post_json("/slots/0?action=save", {{"filename", "good"}});
  ASSERT_TRUE(saved) << httplib::to_string(saved.error());
  ASSERT_EQ(saved->status, 200) << saved->body;
  const std::vector<char> good = read_bytes(slots + "/good");
  ASSERT_GT(good.size(), 200u);

  // Injected, one file each: a flipped byte, a cut, another format version, bytes that are no
  // snapshot, a cache snapshot renamed into the slot directory, and a directory.
  std::vector<char> bytes = good;
  bytes[good.size() / 2] ^= 0x40;
  write_bytes(slots + "/flipped", bytes);
  write_bytes(slots + "/cut", {good.begin(), good.begin() + static_cast<long>(good.size() / 2)});
  bytes = good;
  bytes[8] = 1;  // format version 1
  write_bytes(slots + "/old-version", bytes);
  write_bytes(slots + "/text", {'h', 'e', 'l', 'l', 'o'});
  const std::string snapshot = offload_now(*servers.offload, dir);
  ASSERT_FALSE(snapshot.empty());
  write_bytes(slots + "/cache-file", read_bytes(snapshot));
  ASSERT_EQ(::mkdir((slots + "/dir").c_str(), 0700), 0);

  for (const std::string name :
       {"flipped", "cut", "old-version", "text", "cache-file", "dir", "missing"}) {
    SCOPED_TRACE(name);
    httplib::Result restored =
        servers.offload->post_json("/slots/0?action=restore", {{"filename", name}});
    ASSERT_TRUE(restored) << httplib::to_string(restored.error());
    EXPECT_EQ(restored->status, 400) << restored->body;
    const json body = json::parse(restored->body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << restored->body;
    EXPECT_EQ(body["error"].value("type", ""), "invalid_request_error") << restored->body;
    EXPECT_EQ(body["error"].value("param", ""), "filename") << restored->body;
    EXPECT_THAT(body["error"].value("message", ""), HasSubstr("\"" + name + "\""));
    EXPECT_THAT(restored->body, Not(HasSubstr(temp.path()))) << "a server path reached the client";
  }
  // None of the refusals cost the session or the server anything.
  expect_healthy(*servers.offload);
  both_answer(servers, completion_request(kFilesFirst + " again", 16), "after the refusals");
  expect_clean_exit(*servers.offload);
}

}  // namespace
}  // namespace siesta::testing
