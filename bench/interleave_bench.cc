// Several conversations at once on one device, each figure beside its baseline in the same
// process:
//
//   short_beside_long/<backend>/<model>   a short request arrives while another conversation
//     generates SIESTA_BENCH_LONG tokens (P = 2): its time to first token against the same
//     request on an idle engine, and how many tokens the long one generated meanwhile (its
//     steps and the short one's take turns: the short one does not wait for the long one to
//     end). counters: short_alone_ms, short_beside_long_ms, beside_over_alone,
//     long_tokens_meanwhile, long_rest_ms (what the short one would have waited behind it).
//
//   decode_beside_save/<backend>/<model>  one conversation decodes while another one's
//     snapshot of SIESTA_BENCH_HISTORY tokens is saved and its memory released (P = N = 2, the
//     save on the engine's background thread): its tokens/s while the save runs against its
//     tokens/s alone over the same token positions. counters: alone_tokens_per_s,
//     beside_save_tokens_per_s, ratio, save_ms, tokens_during_save.
//
// Environment: SIESTA_BENCH_MODEL (synthetic:small), SIESTA_BENCH_CTX (2048), SIESTA_BENCH_LONG
// (1000 tokens, within the ctx), SIESTA_BENCH_HISTORY (1024), SIESTA_BENCH_DIR (the snapshots'
// disk: /tmp).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_engine_rig.h"
#include "bench/bench_env.h"
#include "bench/bench_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Tokens a generation has streamed, with when each came; a waiter can ask for the n-th.
class TokenClock {
 public:
  void on_token() {
    std::lock_guard lock(mutex_);
    times_.push_back(Clock::now());
    changed_.notify_all();
  }
  // Waits until `n` tokens have come (a real condition, bounded by `timeout`).
  bool wait_for(size_t n, std::chrono::seconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] { return times_.size() >= n; });
  }
  std::vector<Clock::time_point> times() {
    std::lock_guard lock(mutex_);
    return times_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Clock::time_point> times_;
};

engine::GenerateRequest request_of(std::string prompt, uint32_t max_tokens, uint32_t slot,
                                   TokenClock* clock) {
  engine::GenerateRequest request;
  request.prompt = std::move(prompt);
  request.max_tokens = max_tokens;
  request.route = engine::route_by_slot(slot);
  if (clock != nullptr) request.on_text = [clock](std::string_view) { clock->on_token(); };
  return request;
}

Result<engine::ModelConfig> bench_config() {
  return engine::model_config_from_spec(env_text("SIESTA_BENCH_MODEL", "synthetic:small"),
                                        static_cast<uint32_t>(env_number("SIESTA_BENCH_CTX", 2048)),
                                        std::nullopt);
}

void short_beside_long(benchmark::State& state, const std::string& backend) {
  Result<engine::ModelConfig> config = bench_config();
  if (!config.ok()) return state.SkipWithError(config.status().to_string().c_str());
  const uint32_t long_tokens = static_cast<uint32_t>(env_number("SIESTA_BENCH_LONG", 1000));
  if (long_tokens + 64 >= config->context) {
    return state.SkipWithError("SIESTA_BENCH_LONG must fit the ctx");
  }
  for (auto _ : state) {
    EngineRig rig;
    engine::EngineSessions sessions;
    sessions.parallel = 2;
    sessions.max_sessions = 2;
    if (Status made = make_engine_rig(backend, *config, false, true, "", rig, sessions);
        !made.ok()) {
      return state.SkipWithError(made.to_string().c_str());
    }
    engine::Engine& engine = rig.engine();
    std::string short_prompt = "a short question: ";
    pad_prompt(short_prompt, 32);
    // Alone: the median of five, each a fresh prompt (nothing cached).
    std::vector<double> alone;
    for (int i = 0; i < 5; ++i) {
      const auto start = Clock::now();
      Result<engine::GenerateResult> r =
          engine.generate(request_of(std::to_string(i) + short_prompt, 1, 1, nullptr)).get();
      if (!r.ok()) return state.SkipWithError(r.status().to_string().c_str());
      alone.push_back(ms_between(start, Clock::now()));
    }
    std::sort(alone.begin(), alone.end());

    TokenClock long_clock;
    std::string long_prompt = "a long story: ";
    pad_prompt(long_prompt, 64);
    auto long_done = engine.generate(request_of(long_prompt, long_tokens, 0, &long_clock));
    if (!long_clock.wait_for(50, std::chrono::seconds(600))) {
      return state.SkipWithError("the long generation did not start");
    }
    const size_t before = long_clock.times().size();
    const auto start = Clock::now();
    Result<engine::GenerateResult> beside =
        engine.generate(request_of("beside: " + short_prompt, 1, 1, nullptr)).get();
    const auto end = Clock::now();
    if (!beside.ok()) return state.SkipWithError(beside.status().to_string().c_str());
    const size_t during = long_clock.times().size() - before;
    Result<engine::GenerateResult> long_result = long_done.get();
    if (!long_result.ok()) return state.SkipWithError(long_result.status().to_string().c_str());
    const std::vector<Clock::time_point> times = long_clock.times();

    const double beside_ms = ms_between(start, end);
    state.SetIterationTime(beside_ms / 1000);
    state.counters["short_alone_ms"] = alone[alone.size() / 2];
    state.counters["short_beside_long_ms"] = beside_ms;
    state.counters["beside_over_alone"] = beside_ms / alone[alone.size() / 2];
    state.counters["long_tokens_meanwhile"] = static_cast<double>(during);
    state.counters["long_rest_ms"] = ms_between(end, times.back());
    state.counters["long_tokens"] = static_cast<double>(times.size());
  }
}

// The tokens streamed within [from, to]: the index of the first and of the last.
struct TokenSpan {
  size_t first = 0, last = 0;
  size_t count() const { return last >= first ? last - first + 1 : 0; }
};
TokenSpan tokens_within(const std::vector<Clock::time_point>& times, Clock::time_point from,
                        Clock::time_point to) {
  TokenSpan span{1, 0};
  bool any = false;
  for (size_t i = 0; i < times.size(); ++i) {
    if (times[i] < from || times[i] > to) continue;
    if (!any) span.first = i;
    span.last = i;
    any = true;
  }
  return span;
}

// Tokens per second from token `span.first` to token `span.last` (a decode step costs more as
// the context grows, so two runs are compared over the same token positions).
double rate_over(const std::vector<Clock::time_point>& times, TokenSpan span) {
  if (span.count() < 2 || span.last >= times.size()) return 0;
  return static_cast<double>(span.count() - 1) /
         std::chrono::duration<double>(times[span.last] - times[span.first]).count();
}

void decode_beside_save(benchmark::State& state, const std::string& backend) {
  Result<engine::ModelConfig> config = bench_config();
  if (!config.ok()) return state.SkipWithError(config.status().to_string().c_str());
  const uint64_t history = env_number("SIESTA_BENCH_HISTORY", 1024);
  const uint32_t decode_tokens = static_cast<uint32_t>(env_number("SIESTA_BENCH_LONG", 1000));
  if (history + 16 >= config->context || decode_tokens + 64 >= config->context) {
    return state.SkipWithError("SIESTA_BENCH_HISTORY and SIESTA_BENCH_LONG must fit the ctx");
  }
  for (auto _ : state) {
    EngineRig rig;
    engine::EngineSessions sessions;
    sessions.parallel = 2;
    sessions.max_sessions = 2;
    if (Status made =
            make_engine_rig(backend, *config, true, true,
                            bench_store_dir(bench_base_dir(), "interleave"), rig, sessions,
                            /*background=*/true);
        !made.ok()) {
      return state.SkipWithError(made.to_string().c_str());
    }
    engine::Engine& engine = rig.engine();
    std::string saved_prompt = "the conversation that sleeps: ";
    pad_prompt(saved_prompt, history);
    Result<engine::GenerateResult> filled =
        engine.generate(request_of(saved_prompt, 1, 0, nullptr)).get();
    if (!filled.ok()) return state.SkipWithError(filled.status().to_string().c_str());

    std::string decode_prompt = "the conversation that talks: ";
    pad_prompt(decode_prompt, 64);
    // Alone: B decodes with nothing else on the device (after a first run that warms it up).
    // Both prompts have the same length, so token i of each is at the same position.
    std::vector<Clock::time_point> alone_times;
    for (const char* run : {"warm: ", "alone: "}) {
      TokenClock alone_clock;
      Result<engine::GenerateResult> alone =
          engine.generate(request_of(run + decode_prompt, decode_tokens, 1, &alone_clock)).get();
      if (!alone.ok()) return state.SkipWithError(alone.status().to_string().c_str());
      alone_times = alone_clock.times();
    }

    // Beside: A's save starts once B is decoding; B's rate while A's state is "saving".
    TokenClock beside_clock;
    auto beside_done =
        engine.generate(request_of("saves: " + decode_prompt, decode_tokens, 1, &beside_clock));
    if (!beside_clock.wait_for(20, std::chrono::seconds(600))) {
      return state.SkipWithError("the decode did not start");
    }
    if (Status asked = engine.offload_now(); !asked.ok()) {
      return state.SkipWithError(asked.to_string().c_str());
    }
    // Polled from this thread: status never waits for the engine or the save.
    const auto save_start = Clock::now();
    Clock::time_point save_end = save_start;
    for (;;) {
      const OffloadState a = engine.sessions()[0].state;
      save_end = Clock::now();
      if (a == OffloadState::kDisk) break;
      if (ms_between(save_start, save_end) > 600'000) {
        return state.SkipWithError("the save did not end");
      }
      std::this_thread::yield();
    }
    Result<engine::GenerateResult> beside = beside_done.get();
    if (!beside.ok()) return state.SkipWithError(beside.status().to_string().c_str());
    const std::vector<Clock::time_point> beside_times = beside_clock.times();
    const TokenSpan span = tokens_within(beside_times, save_start, save_end);
    if (span.count() < 2) {
      return state.SkipWithError("the save ended before two tokens: longer history");
    }
    const double beside_rate = rate_over(beside_times, span);
    const double alone_rate = rate_over(alone_times, span);

    state.SetIterationTime(ms_between(save_start, save_end) / 1000);
    state.counters["alone_tokens_per_s"] = alone_rate;
    state.counters["beside_save_tokens_per_s"] = beside_rate;
    state.counters["ratio"] = alone_rate > 0 ? beside_rate / alone_rate : 0;
    state.counters["save_ms"] = ms_between(save_start, save_end);
    state.counters["tokens_during_save"] = static_cast<double>(span.count());
    state.counters["first_token_during_save"] = static_cast<double>(span.first);
  }
}

}  // namespace
}  // namespace siesta::bench

int main(int argc, char** argv) {
  const std::string spec = siesta::bench::env_text("SIESTA_BENCH_MODEL", "synthetic:small");
  for (const std::string& backend : siesta::bench::engine_backends("interleave_bench")) {
    std::string suffix = "/";
    suffix += backend;
    suffix += "/";
    suffix += spec;
    benchmark::RegisterBenchmark(("short_beside_long" + suffix).c_str(),
                                 siesta::bench::short_beside_long, backend)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("decode_beside_save" + suffix).c_str(),
                                 siesta::bench::decode_beside_save, backend)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
