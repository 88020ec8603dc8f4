// The /metrics body: Prometheus text format 0.0.4, every family with HELP and TYPE, every
// series present from the start, histograms cumulative with +Inf, _sum and _count.
#include "server/metrics_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace siesta::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Sample lines as "name{labels}" -> value text.
std::map<std::string, std::string> samples_of(const std::string& text) {
  std::map<std::string, std::string> samples;
  for (const std::string& line : lines_of(text)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    samples[line.substr(0, space)] = line.substr(space + 1);
  }
  return samples;
}

StatusSnapshot busy_snapshot() {
  StatusSnapshot snapshot;
  snapshot.memory.committed_bytes = 4096;
  snapshot.engine = {.busy = true, .queued = 2, .commands_run = 7, .history_tokens = 9};
  OffloadStatus& cache = snapshot.cache;
  cache.state = OffloadState::kDisk;
  cache.disk_bytes = 1000;
  cache.released_vram_bytes = 2000;
  cache.released_host_bytes = 300;
  cache.tokens = 42;
  cache.counters.saves = 3;
  cache.counters.saves_ahead = 8;
  cache.counters.delta_saves = 6;
  cache.counters.restores = 2;
  cache.counters.restore_hits = 1;
  cache.counters.fallbacks[static_cast<size_t>(FallbackReason::kCorrupt)] = 1;
  cache.counters.write_failures = 4;
  cache.counters.cancelled_saves = 5;
  cache.counters.out_of_memory_retries = 6;
  cache.counters.save_seconds.observe(0.003);
  cache.counters.save_seconds.observe(0.2);
  cache.counters.save_seconds.observe(30);
  return snapshot;
}

TEST(MetricsTextTest, EveryLineIsACommentOrASample) {
  const std::string text = metrics_text(busy_snapshot());
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  // name{labels} value, with the 0.0.4 grammar's name and label characters.
  const std::regex sample(
      R"(siesta_[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"\\\n]*"\})? (\d+|[0-9.e+-]+|\+Inf|NaN))");
  const std::regex comment(R"(# (HELP|TYPE) siesta_[a-z_]+ .+)");
  for (const std::string& line : lines_of(text)) {
    EXPECT_TRUE(std::regex_match(line, sample) || std::regex_match(line, comment)) << line;
  }
}

TEST(MetricsTextTest, EveryFamilyHasHelpAndTypeOnce) {
  const std::string text = metrics_text(StatusSnapshot{});
  const std::map<std::string, std::string> types = {
      {"cache_state", "gauge"},
      {"cache_disk_bytes", "gauge"},
      {"cache_ram_bytes", "gauge"},
      {"cache_released_vram_bytes", "gauge"},
      {"cache_released_host_bytes", "gauge"},
      {"cache_tokens", "gauge"},
      {"cache_saves_total", "counter"},
      {"cache_saves_ahead_total", "counter"},
      {"cache_delta_saves_total", "counter"},
      {"cache_restores_total", "counter"},
      {"cache_restore_hits_total", "counter"},
      {"cache_fallbacks_total", "counter"},
      {"cache_expirations_total", "counter"},
      {"cache_write_failures_total", "counter"},
      {"cache_cancelled_saves_total", "counter"},
      {"cache_out_of_memory_retries_total", "counter"},
      {"cache_delete_failures_total", "counter"},
      {"cache_ram_saves_total", "counter"},
      {"cache_ram_restores_total", "counter"},
      {"cache_cold_restores_total", "counter"},
      {"cache_cold_restores_around_cache_total", "counter"},
      {"cache_cold_read_bytes_per_second", "gauge"},
      {"cache_cold_reads_counted_total", "counter"},
      {"cache_ram_full_total", "counter"},
      {"cache_ram_spills_total", "counter"},
      {"cache_save_duration_seconds", "histogram"},
      {"cache_restore_duration_seconds", "histogram"},
      {"engine_commands_total", "counter"},
      {"engine_busy", "gauge"},
      {"http_clients_gone_total", "counter"},
      {"backend_committed_bytes", "gauge"},
  };
  for (const auto& [name, type] : types) {
    const std::string type_line = "# TYPE siesta_" + name + " " + type + "\n";
    const size_t at = text.find(type_line);
    ASSERT_NE(at, std::string::npos) << name;
    EXPECT_EQ(text.find(type_line, at + 1), std::string::npos) << name << " twice";
    EXPECT_THAT(text, HasSubstr("# HELP siesta_" + name + " ")) << name;
  }
  size_t type_lines = 0;
  for (const std::string& line : lines_of(text)) type_lines += line.starts_with("# TYPE ");
  EXPECT_EQ(type_lines, types.size()) << "a family this test does not know of";
}

TEST(MetricsTextTest, StateIsOneHot) {
  const auto samples = samples_of(metrics_text(busy_snapshot()));
  for (const char* state : {"disabled", "resident", "saving", "disk", "restoring", "expired"}) {
    const std::string key = std::string("siesta_cache_state{state=\"") + state + "\"}";
    ASSERT_TRUE(samples.contains(key)) << key;
    EXPECT_EQ(samples.at(key), std::string(state) == "disk" ? "1" : "0") << state;
  }
}

TEST(MetricsTextTest, GaugesAndCountersCarryTheSnapshot) {
  const auto samples = samples_of(metrics_text(busy_snapshot()));
  const std::map<std::string, std::string> expected = {
      {"siesta_cache_disk_bytes", "1000"},
      {"siesta_cache_released_vram_bytes", "2000"},
      {"siesta_cache_released_host_bytes", "300"},
      {"siesta_cache_tokens", "42"},
      {"siesta_cache_saves_total", "3"},
      {"siesta_cache_saves_ahead_total", "8"},
      {"siesta_cache_delta_saves_total", "6"},
      {"siesta_cache_restores_total", "2"},
      {"siesta_cache_restore_hits_total", "1"},
      {"siesta_cache_fallbacks_total{reason=\"corrupt\"}", "1"},
      {"siesta_cache_fallbacks_total{reason=\"not_found\"}", "0"},
      {"siesta_cache_write_failures_total", "4"},
      {"siesta_cache_cancelled_saves_total", "5"},
      {"siesta_cache_out_of_memory_retries_total", "6"},
      {"siesta_engine_commands_total", "7"},
      {"siesta_engine_busy", "1"},
      {"siesta_backend_committed_bytes", "4096"},
  };
  for (const auto& [key, value] : expected) {
    ASSERT_TRUE(samples.contains(key)) << key;
    EXPECT_EQ(samples.at(key), value) << key;
  }
  size_t reasons = 0;
  for (const auto& [key, value] : samples)
    reasons += key.starts_with("siesta_cache_fallbacks_total{");
  EXPECT_EQ(reasons, kFallbackReasonCount);
}

TEST(MetricsTextTest, ColdReadsCarryEachWaysRateAndCount) {
  StatusSnapshot snapshot;
  snapshot.cold_reads.learning = false;
  snapshot.cold_reads.of(ColdReadChoice::Way::kAroundCache).bytes_per_second = 2.5e9;
  snapshot.cold_reads.of(ColdReadChoice::Way::kThroughCache).bytes_per_second = 1.25e9;
  snapshot.cold_reads.of(ColdReadChoice::Way::kAroundCache).reads = 7;
  snapshot.cold_reads.of(ColdReadChoice::Way::kThroughCache).reads = 3;
  const auto samples = samples_of(metrics_text(snapshot));
  const std::map<std::string, double> expected = {
      {"siesta_cache_cold_read_bytes_per_second{way=\"around_cache\"}", 2.5e9},
      {"siesta_cache_cold_read_bytes_per_second{way=\"through_cache\"}", 1.25e9},
      {"siesta_cache_cold_reads_counted_total{way=\"around_cache\"}", 7},
      {"siesta_cache_cold_reads_counted_total{way=\"through_cache\"}", 3},
  };
  for (const auto& [key, value] : expected) {
    ASSERT_TRUE(samples.contains(key)) << key;
    EXPECT_EQ(std::stod(samples.at(key)), value) << key << " " << samples.at(key);
  }
}

TEST(MetricsTextTest, HistogramIsCumulativeWithInfSumAndCount) {
  const auto samples = samples_of(metrics_text(busy_snapshot()));
  const std::string bucket = "siesta_cache_save_duration_seconds_bucket";
  EXPECT_EQ(samples.at(bucket + "{le=\"0.001\"}"), "0");
  EXPECT_EQ(samples.at(bucket + "{le=\"0.005\"}"), "1");
  EXPECT_EQ(samples.at(bucket + "{le=\"0.25\"}"), "2");
  EXPECT_EQ(samples.at(bucket + "{le=\"10\"}"), "2");
  EXPECT_EQ(samples.at(bucket + "{le=\"+Inf\"}"), "3");
  EXPECT_EQ(samples.at("siesta_cache_save_duration_seconds_count"), "3");
  EXPECT_DOUBLE_EQ(std::stod(samples.at("siesta_cache_save_duration_seconds_sum")), 30.203);
  size_t buckets = 0;
  for (const auto& [key, value] : samples) buckets += key.starts_with(bucket + "{");
  EXPECT_EQ(buckets, DurationHistogram::kBuckets + 1);
  // The restore histogram exists though nothing was observed.
  EXPECT_EQ(samples.at("siesta_cache_restore_duration_seconds_bucket{le=\"+Inf\"}"), "0");
  EXPECT_EQ(samples.at("siesta_cache_restore_duration_seconds_sum"), "0");
}

TEST(MetricsTextTest, BoundsAreWrittenShortest) {
  const std::string text = metrics_text(StatusSnapshot{});
  EXPECT_THAT(text, HasSubstr("le=\"0.005\""));
  EXPECT_THAT(text, HasSubstr("le=\"2.5\""));
  EXPECT_THAT(text, Not(HasSubstr("0.0050000")));
  EXPECT_THAT(text, Not(HasSubstr("inf\"")));
  EXPECT_THAT(text, HasSubstr("le=\"10\"")) << "not 1e+01";
  EXPECT_THAT(text, Not(HasSubstr("e+")));
}

TEST(MetricsTextTest, SeveralConversationsAddTheirFamilies) {
  EXPECT_THAT(metrics_text(StatusSnapshot{}), Not(HasSubstr("siesta_sessions")));
  StatusSnapshot snapshot;
  engine::SessionStatus resident;
  resident.state = OffloadState::kResident;
  engine::SessionStatus disk;
  disk.state = OffloadState::kDisk;
  snapshot.sessions = std::vector<engine::SessionStatus>{resident, disk, disk};
  snapshot.evictions = 4;
  snapshot.forgotten = 1;
  snapshot.refused_busy = 2;
  snapshot.engine.queued = 3;
  snapshot.wait_seconds.observe(0.002);
  const std::string text = metrics_text(snapshot);
  EXPECT_THAT(text, HasSubstr("siesta_sessions{state=\"resident\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("siesta_sessions{state=\"disk\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("siesta_sessions{state=\"saving\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("siesta_session_evictions_total 4\n"));
  EXPECT_THAT(text, HasSubstr("siesta_session_forgotten_total 1\n"));
  EXPECT_THAT(text, HasSubstr("siesta_engine_queue_refused_total 2\n"));
  EXPECT_THAT(text, HasSubstr("siesta_engine_queue_length 3\n"));
  EXPECT_THAT(text, HasSubstr("siesta_engine_queue_wait_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE siesta_engine_queue_wait_seconds histogram\n"));
}

}  // namespace
}  // namespace siesta::server
