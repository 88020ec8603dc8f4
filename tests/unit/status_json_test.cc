// The /v1/status body: every key present, with the right JSON type, from the first moment,
// whether offload is on or off; the numbers it is given, counters and fallbacks included.
#include "server/status_json.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace siesta::server {
namespace {

using nlohmann::json;

StatusSnapshot sample_snapshot() {
  StatusSnapshot snapshot;
  snapshot.version = "0.1.0";
  snapshot.uptime_seconds = 12;
  snapshot.backend_name = "sim";
  snapshot.kernels_name = "host";
  snapshot.granularity = 2u << 20;
  snapshot.memory = {
      .reserved_bytes = 1, .committed_bytes = 2, .device_total_bytes = 3, .device_free_bytes = 4};
  snapshot.model = {
      .name = "synthetic:small", .context = 2048, .kv_type = KvType::kF16, .layers = 4, .dim = 128};
  snapshot.engine = {.busy = true, .queued = 2, .commands_run = 5, .history_tokens = 77};
  snapshot.cache.expire_seconds = 3600;
  return snapshot;
}

void expect_integers(const json& object, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    ASSERT_TRUE(object.contains(key)) << key << " missing in " << object.dump();
    EXPECT_TRUE(object.at(key).is_number_integer()) << key << " is " << object.at(key).type_name();
  }
}

void expect_strings(const json& object, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    ASSERT_TRUE(object.contains(key)) << key << " missing in " << object.dump();
    EXPECT_TRUE(object.at(key).is_string()) << key;
  }
}

void expect_shape(const json& body) {
  ASSERT_TRUE(body.is_object());
  EXPECT_EQ(body.size(), 5u) << body.dump();
  for (const char* section : {"server", "backend", "model", "engine", "cache"}) {
    ASSERT_TRUE(body.contains(section) && body[section].is_object()) << section;
  }
  EXPECT_EQ(body["server"].size(), 2u);
  expect_strings(body["server"], {"version"});
  expect_integers(body["server"], {"uptime_seconds"});

  EXPECT_EQ(body["backend"].size(), 7u);
  expect_strings(body["backend"], {"name", "kernels"});
  expect_integers(body["backend"], {"granularity", "reserved_bytes", "committed_bytes",
                                    "device_total_bytes", "device_free_bytes"});

  EXPECT_EQ(body["model"].size(), 5u);
  expect_strings(body["model"], {"name", "kv_type"});
  expect_integers(body["model"], {"context", "layers", "dim"});

  EXPECT_EQ(body["engine"].size(), 4u);
  ASSERT_TRUE(body["engine"].contains("busy"));
  EXPECT_TRUE(body["engine"]["busy"].is_boolean());
  expect_integers(body["engine"], {"queued", "commands_run", "history_tokens"});

  const json& cache = body["cache"];
  EXPECT_EQ(cache.size(), 13u);
  ASSERT_TRUE(cache.contains("cold_reads") && cache["cold_reads"].is_object());
  EXPECT_EQ(cache["cold_reads"].size(), 5u);
  expect_strings(cache["cold_reads"], {"way"});
  expect_integers(cache["cold_reads"], {"around_cache_reads", "through_cache_reads"});
  for (const char* rate : {"around_cache_gb_s", "through_cache_gb_s"}) {
    ASSERT_TRUE(cache["cold_reads"].contains(rate)) << rate;
    EXPECT_TRUE(cache["cold_reads"][rate].is_number()) << rate;
  }
  ASSERT_TRUE(cache.contains("persistence") && cache["persistence"].is_object());
  EXPECT_EQ(cache["persistence"].size(), 6u);
  EXPECT_TRUE(cache["persistence"]["enabled"].is_boolean());
  expect_integers(cache["persistence"], {"offered", "adopted", "adopted_bytes", "empty"});
  EXPECT_EQ(cache["persistence"]["refused"].size(), 5u);
  expect_integers(cache["persistence"]["refused"],
                  {"foreign", "unreadable", "expired", "no_room", "failed"});
  expect_strings(cache, {"state", "last_error"});
  expect_integers(cache, {"idle_seconds", "expire_seconds", "disk_bytes", "ram_bytes",
                          "released_vram_bytes", "released_host_bytes", "tokens"});
  ASSERT_TRUE(cache.contains("operation_ms"));
  EXPECT_TRUE(cache["operation_ms"].is_number());
  ASSERT_TRUE(cache.contains("counters") && cache["counters"].is_object());
  const json& counters = cache["counters"];
  EXPECT_EQ(counters.size(), 17u);
  expect_integers(
      counters,
      {"saves", "restores", "restore_hits", "expirations", "write_failures", "cancelled_saves",
       "out_of_memory_retries", "delete_failures", "ram_saves", "ram_restores", "cold_restores",
       "cold_restores_around_cache", "ram_full", "ram_spills", "delta_saves", "disk_drops"});
  ASSERT_TRUE(counters.contains("fallbacks") && counters["fallbacks"].is_object());
  EXPECT_EQ(counters["fallbacks"].size(), kFallbackReasonCount);
  for (size_t i = 0; i < kFallbackReasonCount; ++i) {
    expect_integers(counters["fallbacks"],
                    {std::string(fallback_reason_name(static_cast<FallbackReason>(i))).c_str()});
  }
}

TEST(StatusJsonTest, DefaultShape) {
  const json body = status_json(sample_snapshot());
  expect_shape(body);
  EXPECT_EQ(body["cache"]["state"], "disabled");
  EXPECT_EQ(body["cache"]["idle_seconds"], 0);
  EXPECT_EQ(body["cache"]["expire_seconds"], 3600);
  EXPECT_EQ(body["cache"]["disk_bytes"], 0);
  EXPECT_EQ(body["cache"]["operation_ms"], 0.0);
  EXPECT_EQ(body["cache"]["last_error"], "");
  EXPECT_EQ(body["cache"]["counters"]["saves"], 0);
}

TEST(StatusJsonTest, CarriesTheNumbersItIsGiven) {
  StatusSnapshot snapshot = sample_snapshot();
  snapshot.cache.state = OffloadState::kDisk;
  snapshot.cache.idle_seconds = 30;
  snapshot.cache.disk_bytes = 309197048;
  snapshot.cache.released_vram_bytes = 192937984;
  snapshot.cache.released_host_bytes = 118063152;
  snapshot.cache.tokens = 4096;
  snapshot.cache.operation_ms = 5300.5;
  snapshot.cache.last_error = "injected: no space";
  OffloadCounters& counters = snapshot.cache.counters;
  counters.saves = 1;
  counters.restores = 2;
  counters.restore_hits = 3;
  counters.fallbacks[static_cast<size_t>(FallbackReason::kForeign)] = 4;
  counters.expirations = 5;
  counters.write_failures = 6;
  counters.cancelled_saves = 7;
  counters.out_of_memory_retries = 8;
  counters.delete_failures = 9;
  const json body = status_json(snapshot);
  expect_shape(body);
  EXPECT_EQ(body["server"]["version"], "0.1.0");
  EXPECT_EQ(body["server"]["uptime_seconds"], 12);
  EXPECT_EQ(body["backend"]["name"], "sim");
  EXPECT_EQ(body["backend"]["kernels"], "host");
  EXPECT_EQ(body["backend"]["granularity"], 2u << 20);
  EXPECT_EQ(body["backend"]["reserved_bytes"], 1);
  EXPECT_EQ(body["backend"]["committed_bytes"], 2);
  EXPECT_EQ(body["backend"]["device_total_bytes"], 3);
  EXPECT_EQ(body["backend"]["device_free_bytes"], 4);
  EXPECT_EQ(body["model"], json({{"name", "synthetic:small"},
                                 {"context", 2048},
                                 {"kv_type", "f16"},
                                 {"layers", 4},
                                 {"dim", 128}}));
  EXPECT_EQ(body["engine"],
            json({{"busy", true}, {"queued", 2}, {"commands_run", 5}, {"history_tokens", 77}}));
  EXPECT_EQ(body["cache"]["state"], "disk");
  EXPECT_EQ(body["cache"]["idle_seconds"], 30);
  EXPECT_EQ(body["cache"]["disk_bytes"], 309197048u);
  EXPECT_EQ(body["cache"]["released_vram_bytes"], 192937984u);
  EXPECT_EQ(body["cache"]["released_host_bytes"], 118063152u);
  EXPECT_EQ(body["cache"]["tokens"], 4096);
  EXPECT_EQ(body["cache"]["operation_ms"], 5300.5);
  EXPECT_EQ(body["cache"]["last_error"], "injected: no space");
  const json& c = body["cache"]["counters"];
  EXPECT_EQ(c["saves"], 1);
  EXPECT_EQ(c["restores"], 2);
  EXPECT_EQ(c["restore_hits"], 3);
  EXPECT_EQ(c["fallbacks"]["foreign"], 4);
  EXPECT_EQ(c["fallbacks"]["corrupt"], 0);
  EXPECT_EQ(c["expirations"], 5);
  EXPECT_EQ(c["write_failures"], 6);
  EXPECT_EQ(c["cancelled_saves"], 7);
  EXPECT_EQ(c["out_of_memory_retries"], 8);
  EXPECT_EQ(c["delete_failures"], 9);
}

TEST(StatusJsonTest, EveryStateHasItsName) {
  const std::vector<std::pair<OffloadState, std::string>> names = {
      {OffloadState::kDisabled, "disabled"},   {OffloadState::kResident, "resident"},
      {OffloadState::kSaving, "saving"},       {OffloadState::kDisk, "disk"},
      {OffloadState::kRestoring, "restoring"}, {OffloadState::kExpired, "expired"}};
  for (const auto& [state, name] : names) {
    StatusSnapshot snapshot = sample_snapshot();
    snapshot.cache.state = state;
    EXPECT_EQ(status_json(snapshot)["cache"]["state"], name);
  }
}

TEST(StatusJsonTest, EveryKvTypeHasItsName) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    StatusSnapshot snapshot = sample_snapshot();
    snapshot.model.kv_type = type;
    EXPECT_EQ(status_json(snapshot)["model"]["kv_type"], std::string(kv_type_name(type)));
  }
}

}  // namespace
}  // namespace siesta::server

namespace siesta::server {
namespace {

TEST(StatusJsonTest, PersistenceShowsWhatTheStartAdoptedAndRefusedByReason) {
  StatusSnapshot snapshot = sample_snapshot();
  EXPECT_EQ(status_json(snapshot)["cache"]["persistence"]["enabled"], false);
  snapshot.persist = true;
  snapshot.adoption = {.offered = 9,
                       .adopted = 3,
                       .adopted_bytes = 4096,
                       .empty = 1,
                       .foreign = 1,
                       .unreadable = 2,
                       .expired = 1,
                       .no_room = 1,
                       .failed = 1};
  const json persistence = status_json(snapshot)["cache"]["persistence"];
  EXPECT_EQ(
      persistence,
      json({{"enabled", true},
            {"offered", 9},
            {"adopted", 3},
            {"adopted_bytes", 4096},
            {"empty", 1},
            {"refused",
             {{"foreign", 1}, {"unreadable", 2}, {"expired", 1}, {"no_room", 1}, {"failed", 1}}}}));
}

TEST(StatusJsonTest, OneConversationHasNoSessionsList) {
  const nlohmann::json body = status_json(sample_snapshot());
  EXPECT_FALSE(body["cache"].contains("sessions"));
  EXPECT_EQ(body["cache"].size(), 13u);
}

TEST(StatusJsonTest, ColdReadsSayTheWayLearnedAndEachWaysRate) {
  StatusSnapshot snapshot = sample_snapshot();
  EXPECT_EQ(status_json(snapshot)["cache"]["cold_reads"]["way"], "learning");
  snapshot.cold_reads.learning = false;
  snapshot.cold_reads.preferred = ColdReadChoice::Way::kThroughCache;
  snapshot.cold_reads.of(ColdReadChoice::Way::kAroundCache).bytes_per_second = 1.5e9;
  snapshot.cold_reads.of(ColdReadChoice::Way::kThroughCache).bytes_per_second = 2.25e9;
  snapshot.cold_reads.of(ColdReadChoice::Way::kAroundCache).reads = 4;
  snapshot.cold_reads.of(ColdReadChoice::Way::kThroughCache).reads = 19;
  const nlohmann::json cold = status_json(snapshot)["cache"]["cold_reads"];
  EXPECT_EQ(cold, nlohmann::json({{"way", "through_cache"},
                                  {"around_cache_gb_s", 1.5},
                                  {"through_cache_gb_s", 2.25},
                                  {"around_cache_reads", 4},
                                  {"through_cache_reads", 19}}))
      << cold.dump();
  snapshot.cold_reads.preferred = ColdReadChoice::Way::kAroundCache;
  EXPECT_EQ(status_json(snapshot)["cache"]["cold_reads"]["way"], "around_cache");
}

TEST(StatusJsonTest, TheDiskBudgetIsShownWithItsUseAndDeletionsWhenThereIsOne) {
  StatusSnapshot snapshot = sample_snapshot();
  EXPECT_FALSE(status_json(snapshot)["cache"].contains("disk_tier"));
  snapshot.disk_budget = DiskBudgetStats{1 << 30, 8192, 3, 1, 2};
  const nlohmann::json tier = status_json(snapshot)["cache"]["disk_tier"];
  EXPECT_EQ(tier, nlohmann::json({{"budget_bytes", 1 << 30},
                                  {"used_bytes", 8192},
                                  {"deleted_for_room", 3},
                                  {"delete_failures", 1},
                                  {"refused", 2}}))
      << tier.dump();
}

TEST(StatusJsonTest, TheRamTierIsShownWithItsBudgetAndUseWhenThereIsOne) {
  StatusSnapshot snapshot = sample_snapshot();
  EXPECT_FALSE(status_json(snapshot)["cache"].contains("ram_tier"));
  snapshot.ram_tier = RamTierStats{1 << 30, 12288, 2, 3, 1, true, 1 << 28, 5, 4, 6};
  snapshot.cache.ram_bytes = 12288;
  snapshot.cache.state = OffloadState::kRam;
  const nlohmann::json body = status_json(snapshot);
  EXPECT_EQ(body["cache"]["state"], "ram");
  EXPECT_EQ(body["cache"]["ram_bytes"], 12288);
  const nlohmann::json& tier = body["cache"]["ram_tier"];
  EXPECT_EQ(tier, nlohmann::json({{"budget_bytes", 1 << 30},
                                  {"used_bytes", 12288},
                                  {"snapshots", 2},
                                  {"refused_full", 3},
                                  {"allocation_failures", 1},
                                  {"direct_copies", true},
                                  {"ready_bytes", 1 << 28},
                                  {"spills", 5},
                                  {"spill_failures", 4},
                                  {"bases_dropped", 6}}))
      << tier.dump();
}

TEST(StatusJsonTest, SeveralConversationsAreListedWithoutPromptOrKey) {
  StatusSnapshot snapshot = sample_snapshot();
  engine::SessionStatus one;
  one.id = 3;
  one.state = OffloadState::kDisk;
  one.tokens = 120;
  one.disk_bytes = 4096;
  one.ram_bytes = 8192;
  one.seconds_idle = 1.5;
  one.restores = 2;
  one.fallbacks = 1;
  one.operation_ms = 12.5;
  one.keyed = true;
  snapshot.sessions = std::vector<engine::SessionStatus>{one};
  const nlohmann::json body = status_json(snapshot);
  const nlohmann::json& sessions = body["cache"]["sessions"];
  ASSERT_TRUE(sessions.is_array());
  ASSERT_EQ(sessions.size(), 1u);
  const nlohmann::json& s = sessions[0];
  EXPECT_EQ(s.size(), 9u) << s.dump();
  EXPECT_EQ(s["id"], 3);
  EXPECT_EQ(s["state"], "disk");
  EXPECT_EQ(s["tokens"], 120);
  EXPECT_EQ(s["disk_bytes"], 4096);
  EXPECT_EQ(s["ram_bytes"], 8192);
  EXPECT_EQ(s["seconds_idle"], 1.5);
  EXPECT_EQ(s["restores"], 2);
  EXPECT_EQ(s["fallbacks"], 1);
  EXPECT_EQ(s["operation_ms"], 12.5);
  // The totals keep their fields.
  EXPECT_EQ(body["cache"].size(), 14u);
}

}  // namespace
}  // namespace siesta::server
