// The /v1/status body: every key present, with the right JSON type, from the first moment,
// whether offload is on or off.
#include "server/status_json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace siesta::server {
namespace {

using nlohmann::json;

StatusSnapshot snapshot_for(const OffloadConfig& offload) {
  StatusSnapshot snapshot;
  snapshot.version = "0.1.0";
  snapshot.uptime_seconds = 12;
  snapshot.backend_name = "sim";
  snapshot.granularity = 2u << 20;
  snapshot.memory = {
      .reserved_bytes = 1, .committed_bytes = 2, .device_total_bytes = 3, .device_free_bytes = 4};
  snapshot.cache = initial_cache_status(offload);
  return snapshot;
}

void expect_integer(const json& object, const std::string& key) {
  ASSERT_TRUE(object.contains(key)) << key << " missing in " << object.dump();
  EXPECT_TRUE(object.at(key).is_number_integer()) << key << " is " << object.at(key).type_name();
}

void expect_shape(const json& body) {
  ASSERT_TRUE(body.is_object());
  EXPECT_EQ(body.size(), 3u) << body.dump();

  ASSERT_TRUE(body.contains("server") && body["server"].is_object());
  const json& server = body["server"];
  EXPECT_EQ(server.size(), 2u);
  ASSERT_TRUE(server.contains("version"));
  EXPECT_TRUE(server["version"].is_string());
  expect_integer(server, "uptime_seconds");

  ASSERT_TRUE(body.contains("backend") && body["backend"].is_object());
  const json& backend = body["backend"];
  EXPECT_EQ(backend.size(), 6u);
  ASSERT_TRUE(backend.contains("name"));
  EXPECT_TRUE(backend["name"].is_string());
  for (const char* key : {"granularity", "reserved_bytes", "committed_bytes", "device_total_bytes",
                          "device_free_bytes"}) {
    expect_integer(backend, key);
  }

  ASSERT_TRUE(body.contains("cache") && body["cache"].is_object());
  const json& cache = body["cache"];
  EXPECT_EQ(cache.size(), 8u);
  ASSERT_TRUE(cache.contains("state"));
  EXPECT_TRUE(cache["state"].is_string());
  for (const char* key : {"idle_seconds", "expire_seconds", "disk_bytes", "released_vram_bytes",
                          "released_host_bytes", "tokens"}) {
    expect_integer(cache, key);
  }
  ASSERT_TRUE(cache.contains("operation_ms"));
  EXPECT_TRUE(cache["operation_ms"].is_number());
}

TEST(StatusJsonTest, DisabledShape) {
  OffloadConfig off;
  const json body = status_json(snapshot_for(off));
  expect_shape(body);
  EXPECT_EQ(body["cache"]["state"], "disabled");
  EXPECT_EQ(body["cache"]["idle_seconds"], 0);
  EXPECT_EQ(body["cache"]["expire_seconds"], 3600);
  EXPECT_EQ(body["cache"]["disk_bytes"], 0);
  EXPECT_EQ(body["cache"]["operation_ms"], 0.0);
}

TEST(StatusJsonTest, EnabledIsResidentFromTheStart) {
  OffloadConfig on;
  on.idle_seconds = 30;
  on.expire_seconds = 600;
  on.disk_dir = "/d";
  const json body = status_json(snapshot_for(on));
  expect_shape(body);
  EXPECT_EQ(body["cache"]["state"], "resident");
  EXPECT_EQ(body["cache"]["idle_seconds"], 30);
  EXPECT_EQ(body["cache"]["expire_seconds"], 600);
}

TEST(StatusJsonTest, CarriesTheNumbersItIsGiven) {
  StatusSnapshot snapshot = snapshot_for(OffloadConfig{});
  snapshot.cache.state = OffloadState::kDisk;
  snapshot.cache.disk_bytes = 309197048;
  snapshot.cache.released_vram_bytes = 192937984;
  snapshot.cache.released_host_bytes = 118063152;
  snapshot.cache.tokens = 4096;
  snapshot.cache.operation_ms = 5300.5;
  const json body = status_json(snapshot);
  expect_shape(body);
  EXPECT_EQ(body["server"]["version"], "0.1.0");
  EXPECT_EQ(body["server"]["uptime_seconds"], 12);
  EXPECT_EQ(body["backend"]["name"], "sim");
  EXPECT_EQ(body["backend"]["granularity"], 2u << 20);
  EXPECT_EQ(body["backend"]["reserved_bytes"], 1);
  EXPECT_EQ(body["backend"]["committed_bytes"], 2);
  EXPECT_EQ(body["backend"]["device_total_bytes"], 3);
  EXPECT_EQ(body["backend"]["device_free_bytes"], 4);
  EXPECT_EQ(body["cache"]["state"], "disk");
  EXPECT_EQ(body["cache"]["disk_bytes"], 309197048u);
  EXPECT_EQ(body["cache"]["released_vram_bytes"], 192937984u);
  EXPECT_EQ(body["cache"]["released_host_bytes"], 118063152u);
  EXPECT_EQ(body["cache"]["tokens"], 4096);
  EXPECT_EQ(body["cache"]["operation_ms"], 5300.5);
}

TEST(StatusJsonTest, EveryStateHasItsName) {
  const std::vector<std::pair<OffloadState, std::string>> names = {
      {OffloadState::kDisabled, "disabled"},   {OffloadState::kResident, "resident"},
      {OffloadState::kSaving, "saving"},       {OffloadState::kDisk, "disk"},
      {OffloadState::kRestoring, "restoring"}, {OffloadState::kExpired, "expired"}};
  for (const auto& [state, name] : names) {
    StatusSnapshot snapshot = snapshot_for(OffloadConfig{});
    snapshot.cache.state = state;
    EXPECT_EQ(status_json(snapshot)["cache"]["state"], name);
  }
}

}  // namespace
}  // namespace siesta::server
