// The seed's whole HTTP lifecycle on the real binary: generate, go idle, the snapshot on disk
// and the memory released, a prompt that extends the conversation restored from it; a
// corrupted snapshot and an expired one falling back; a stream cancelled by a disconnect;
// an explicit slot save while asleep; a clean stop leaving no snapshot behind.
//
// Every answer of the offloading server is compared with a second server started with offload
// off and fed the same requests: greedy generation is deterministic, so the bytes must match
// whatever the offloader did (restore, fallback, fresh session). No generated text is written
// in this file.
//
// Timing: --cache-idle-seconds 1 (and --cache-expire-seconds 3 where expiry is tested); the
// tests wait for those real-time timers through ServerProcess::wait_for_status.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/raw_http.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::IsEmpty;
using ::testing::SizeIs;

const std::vector<std::string> kLifecycleModel = {"--backend",      "sim",   "--model",
                                                  "synthetic:tiny", "--ctx", "1024"};

// The offloading server and its offload-off twin.
struct Pair {
  std::unique_ptr<ServerProcess> offload;
  std::unique_ptr<ServerProcess> reference;
};

Pair start_pair(const std::vector<std::string>& offload_args) {
  return {start_or_die(with(kLifecycleModel, offload_args)), start_or_die(kLifecycleModel)};
}

// Sends `request` to both servers; both must answer 200 with the same text. Returns the
// offloading server's answer (http_status 0 when something failed; the test has failed then).
Completion both(const Pair& servers, const json& request, const std::string& what) {
  Result<Completion> got = complete(*servers.offload, request);
  Result<Completion> want = complete(*servers.reference, request);
  EXPECT_TRUE(got.ok()) << what << ": " << got.status().to_string();
  EXPECT_TRUE(want.ok()) << what << ": " << want.status().to_string();
  if (!got.ok() || !want.ok()) return {};
  EXPECT_EQ(got->http_status, 200) << what << ": " << got->body.dump();
  EXPECT_EQ(want->http_status, 200) << what << ": " << want->body.dump();
  EXPECT_EQ(got->text, want->text) << what << ": offload on and off disagree; offload server "
                                   << "stderr:\n"
                                   << servers.offload->stderr_text();
  EXPECT_FALSE(got->text.empty()) << what;
  return *got;
}

json wait_state(const ServerProcess& server, const std::string& state) {
  Result<json> status = server.wait_for_cache_state(state);
  EXPECT_TRUE(status.ok()) << status.status().to_string();
  return status.ok() ? *status : json();
}

uint64_t cache_number(const json& status, const std::string& key) {
  if (!status.contains("cache") || !status["cache"].contains(key) ||
      !status["cache"][key].is_number()) {
    ADD_FAILURE() << "no numeric cache." << key << " in " << status.dump();
    return 0;
  }
  return status["cache"][key].get<uint64_t>();
}

// The snapshot: a whole file, and from the second sleep on a delta over it (the restore kept
// the first as its base); disk_bytes counts them all.
void expect_snapshot_on_disk(const std::string& dir, const json& status, size_t segments) {
  ASSERT_THAT(snapshot_files(dir), SizeIs(1)) << ::testing::PrintToString(list_dir(dir));
  const std::vector<std::string> names = snapshot_segment_files(dir);
  ASSERT_THAT(names, SizeIs(segments)) << ::testing::PrintToString(list_dir(dir));
  uint64_t total = 0;
  for (const std::string& name : names) {
    struct stat info {};
    ASSERT_EQ(::stat((dir + "/" + name).c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 07777, 0600u) << name;
    total += static_cast<uint64_t>(info.st_size);
  }
  EXPECT_EQ(total, cache_number(status, "disk_bytes"));
}

// Flips `count` bytes of `path` starting at `offset` (what the "corrupt" test injects).
void flip_bytes(const std::string& path, std::streamoff offset, int count) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file.is_open()) << path;
  for (int i = 0; i < count; ++i) {
    file.seekg(offset + i);
    const int byte = file.get();
    ASSERT_NE(byte, EOF) << path << " is shorter than " << offset + i;
    file.seekp(offset + i);
    file.put(static_cast<char>(byte ^ 0xff));
  }
  ASSERT_TRUE(file.good());
}

const std::string kFirst = "The offloaded session remembers this opening line.";

TEST(ServerLifecycleE2eTest, IdleOffloadThenRestoreGivesTheSameBytesTwice) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  Pair servers = start_pair({"--cache-idle-seconds", "1", "--cache-expire-seconds", "600",
                             "--cache-ram-mib", "0", "--cache-disk-dir", dir});
  ASSERT_NE(servers.offload, nullptr);
  ASSERT_NE(servers.reference, nullptr);

  std::string prompt = kFirst;
  for (int cycle = 1; cycle <= 2; ++cycle) {  // the second wake must work as the first
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    const Completion answer = both(servers, completion_request(prompt, 24), "before sleep");
    const json asleep = wait_state(*servers.offload, "disk");
    EXPECT_GT(cache_number(asleep, "released_vram_bytes"), 0u) << asleep.dump();
    EXPECT_GT(cache_number(asleep, "released_host_bytes"), 0u) << asleep.dump();
    EXPECT_GT(cache_number(asleep, "disk_bytes"), 0u) << asleep.dump();
    EXPECT_GT(cache_number(asleep, "tokens"), 0u) << asleep.dump();
    expect_snapshot_on_disk(dir, asleep, static_cast<size_t>(cycle));

    // The client sends the conversation back with a new line: the history is a prefix.
    prompt += answer.text + "\nAnd then, cycle " + std::to_string(cycle) + ":";
    const Completion restored = both(servers, completion_request(prompt, 24), "after wake");
    EXPECT_GT(restored.cached_tokens, 0)
        << "the restored history was not reused: " << restored.body.dump();
    Result<json> awake = servers.offload->status();
    ASSERT_TRUE(awake.ok()) << awake.status().to_string();
    EXPECT_EQ(cache_counter(*awake, "restore_hits"), cycle) << awake->dump();
    // At least: on a loaded machine the next idle second may have passed already.
    EXPECT_GE(cache_counter(*awake, "saves"), cycle) << awake->dump();
    prompt += restored.text;
  }
  expect_clean_exit(*servers.offload);
}

TEST(ServerLifecycleE2eTest, ExplicitOffloadThenRestore) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  // The idle timer is far away: only POST /v1/cache/offload can put the session to sleep.
  Pair servers = start_pair({"--cache-idle-seconds", "600", "--cache-expire-seconds", "1200",
                             "--cache-ram-mib", "0", "--cache-disk-dir", dir});
  ASSERT_NE(servers.offload, nullptr);
  ASSERT_NE(servers.reference, nullptr);
  const Completion first = both(servers, completion_request(kFirst, 16), "first");

  httplib::Result offload = servers.offload->post("/v1/cache/offload", "");
  ASSERT_TRUE(offload) << httplib::to_string(offload.error());
  EXPECT_TRUE(offload->status == 200 || offload->status == 202)
      << offload->status << " " << offload->body;
  const json asleep = wait_state(*servers.offload, "disk");
  expect_snapshot_on_disk(dir, asleep, 1);

  const Completion next =
      both(servers, completion_request(kFirst + first.text + " Next:", 16), "after offload");
  EXPECT_GT(next.cached_tokens, 0) << next.body.dump();
  expect_clean_exit(*servers.offload);
}

TEST(ServerLifecycleE2eTest, CorruptedSnapshotFallsBackToRereadingThePrompt) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  Pair servers = start_pair({"--cache-idle-seconds", "1", "--cache-expire-seconds", "600",
                             "--cache-ram-mib", "0", "--cache-disk-dir", dir});
  ASSERT_NE(servers.offload, nullptr);
  ASSERT_NE(servers.reference, nullptr);
  const Completion first = both(servers, completion_request(kFirst, 24), "first");
  const json asleep = wait_state(*servers.offload, "disk");
  const std::vector<std::string> names = snapshot_files(dir);
  ASSERT_THAT(names, SizeIs(1));
  const uint64_t size = cache_number(asleep, "disk_bytes");
  ASSERT_GT(size, 64u);

  // Injected: 8 bytes inverted in the middle of the snapshot while the server sleeps.
  flip_bytes(dir + "/" + names[0], static_cast<std::streamoff>(size / 2), 8);

  const json request = completion_request(kFirst + first.text + " Go on:", 24);
  const Completion after = both(servers, request, "after corruption");
  EXPECT_EQ(after.cached_tokens, 0)
      << "a corrupted snapshot must not be reused: " << after.body.dump();
  // The same bytes as a server that never saw the conversation and reads the full prompt.
  std::unique_ptr<ServerProcess> fresh = start_or_die(kLifecycleModel);
  ASSERT_NE(fresh, nullptr);
  Result<Completion> cold = complete(*fresh, request);
  ASSERT_TRUE(cold.ok()) << cold.status().to_string();
  EXPECT_EQ(cold->cached_tokens, 0);
  EXPECT_EQ(after.text, cold->text);

  Result<json> status = servers.offload->status();
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  EXPECT_EQ(cache_counter(*status, "fallbacks", "corrupt"), 1) << status->dump();
  EXPECT_EQ(cache_counter(*status, "restore_hits"), 0) << status->dump();
  EXPECT_EQ(status->at("cache").value("state", ""), "resident") << status->dump();
  expect_clean_exit(*servers.offload);
}

TEST(ServerLifecycleE2eTest, ExpiredSnapshotFallsBackToAFreshSession) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  Pair servers = start_pair({"--cache-idle-seconds", "1", "--cache-expire-seconds", "3",
                             "--cache-ram-mib", "0", "--cache-disk-dir", dir});
  ASSERT_NE(servers.offload, nullptr);
  ASSERT_NE(servers.reference, nullptr);
  const Completion first = both(servers, completion_request(kFirst, 24), "first");
  wait_state(*servers.offload, "disk");
  const json expired = wait_state(*servers.offload, "expired");
  EXPECT_THAT(snapshot_files(dir), IsEmpty()) << "expiry deletes the snapshot";

  const json request = completion_request(kFirst + first.text + " Later:", 24);
  const Completion after = both(servers, request, "after expiry");
  EXPECT_EQ(after.cached_tokens, 0) << after.body.dump();
  Result<json> status = servers.offload->status();
  ASSERT_TRUE(status.ok()) << status.status().to_string();
  EXPECT_EQ(status->at("cache").value("state", ""), "resident") << status->dump();
  EXPECT_EQ(cache_counter(*status, "restore_hits"), 0) << status->dump();
  expect_clean_exit(*servers.offload);
}

TEST(ServerLifecycleE2eTest, CancelledStreamIsFollowedByOffloadAndAGoodGeneration) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  // A long generation (context 8192) so that the disconnect lands while it still runs.
  const std::vector<std::string> model = {"--backend",      "sim",   "--model",
                                          "synthetic:tiny", "--ctx", "8192"};
  std::unique_ptr<ServerProcess> server =
      start_or_die(with(model, {"--cache-idle-seconds", "1", "--cache-expire-seconds", "600",
                                "--cache-ram-mib", "0", "--cache-disk-dir", dir}));
  std::unique_ptr<ServerProcess> reference = start_or_die(model);
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);

  json request = completion_request("Count the stars one by one:", 8000);
  request["stream"] = true;
  Result<SseStream> stream = SseStream::open(server->port(), "/v1/completions", request.dump(), {});
  ASSERT_TRUE(stream.ok()) << stream.status().to_string();
  ASSERT_EQ(stream->head().status, 200);
  Result<std::optional<std::string>> first_event = stream->next_data();
  ASSERT_TRUE(first_event.ok()) << first_event.status().to_string();
  ASSERT_TRUE(first_event->has_value());
  EXPECT_FALSE(json::parse(**first_event, nullptr, false).is_discarded()) << **first_event;
  // Injected: the client hangs up (TCP reset) after the first event.
  stream->disconnect();

  // The idle timer counts from the end of the cancelled generation: the session goes to disk.
  const json asleep = wait_state(*server, "disk");
  expect_snapshot_on_disk(dir, asleep, 1);
  // The disconnect stopped the generation: the history is far from prompt + 8000 tokens.
  const std::string prompt = request["prompt"];
  EXPECT_LT(cache_number(asleep, "tokens"), prompt.size() + 4000)
      << "the disconnect did not cancel the generation: " << asleep.dump();
  std::cout << "history after the cancelled stream: " << cache_number(asleep, "tokens")
            << " tokens\n";

  const json next = completion_request("A different question entirely?", 32);
  Result<Completion> got = complete(*server, next);
  Result<Completion> want = complete(*reference, next);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  EXPECT_EQ(got->http_status, 200) << got->body.dump();
  EXPECT_EQ(got->text, want->text);
  EXPECT_EQ(got->finish_reason, "length");
  expect_clean_exit(*server);
}

TEST(ServerLifecycleE2eTest, SlotSaveWhileAsleepThenRestore) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  const std::string slots = temp.file("slots");
  Pair servers =
      start_pair({"--cache-idle-seconds", "1", "--cache-expire-seconds", "600", "--cache-ram-mib",
                  "0", "--cache-disk-dir", dir, "--slot-save-path", slots});
  ASSERT_NE(servers.offload, nullptr);
  ASSERT_NE(servers.reference, nullptr);
  const Completion first = both(servers, completion_request(kFirst, 24), "first");
  wait_state(*servers.offload, "disk");

  httplib::Result saved =
      servers.offload->post_json("/slots/0?action=save", {{"filename", "conversation-1"}});
  ASSERT_TRUE(saved) << httplib::to_string(saved.error());
  ASSERT_EQ(saved->status, 200) << saved->body;
  EXPECT_THAT(list_dir(slots), ::testing::Not(IsEmpty())) << "the slot file is under " << slots;

  // Another conversation replaces the history on both servers.
  both(servers, completion_request("Something else altogether.", 16), "other conversation");

  httplib::Result restored =
      servers.offload->post_json("/slots/0?action=restore", {{"filename", "conversation-1"}});
  ASSERT_TRUE(restored) << httplib::to_string(restored.error());
  ASSERT_EQ(restored->status, 200) << restored->body;

  const Completion next =
      both(servers, completion_request(kFirst + first.text + " Resume:", 24), "after restore");
  EXPECT_GT(next.cached_tokens, 0) << "the restored slot was not reused: " << next.body.dump();

  httplib::Result erased =
      servers.offload->post_json("/slots/0?action=erase", {{"filename", "conversation-1"}});
  ASSERT_TRUE(erased) << httplib::to_string(erased.error());
  EXPECT_EQ(erased->status, 200) << erased->body;
  EXPECT_THAT(list_dir(slots), IsEmpty());
  httplib::Result missing =
      servers.offload->post_json("/slots/0?action=restore", {{"filename", "conversation-1"}});
  ASSERT_TRUE(missing) << httplib::to_string(missing.error());
  EXPECT_GE(missing->status, 400) << missing->body;
  EXPECT_LT(missing->status, 500) << missing->body;
  expect_clean_exit(*servers.offload);
}

TEST(ServerLifecycleE2eTest, SigtermWhileAsleepLeavesNoSnapshotBehind) {
  TempDir temp;
  const std::string dir = temp.file("cache");
  std::unique_ptr<ServerProcess> server =
      start_or_die(with(kLifecycleModel, {"--cache-idle-seconds", "1", "--cache-expire-seconds",
                                          "600", "--cache-ram-mib", "0", "--cache-disk-dir", dir}));
  ASSERT_NE(server, nullptr);
  Result<Completion> first = complete(*server, completion_request(kFirst, 16));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_EQ(first->http_status, 200);
  wait_state(*server, "disk");
  ASSERT_THAT(snapshot_files(dir), SizeIs(1));

  expect_clean_exit(*server);
  EXPECT_THAT(list_dir(dir), IsEmpty()) << "no snapshot, temporary or lock file is left";
}

}  // namespace
}  // namespace siesta::testing
