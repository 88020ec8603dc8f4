// Conversations per device: N conversations with H tokens of history each take turns over P
// resident sessions, returning in a seeded random order; every return must find its history
// (cached_tokens) and is timed to its first token. Beside it, in the same process and on the
// same device, the two baselines a returning conversation could otherwise cost: one restore of
// a snapshot of that size (a single-session engine, saved then asked again) and the recompute
// of the whole prompt (a fresh conversation with the same prompt length).
//
//   conversations/<backend>/<model>   counters: ttft_p50_ms, ttft_p99_ms (returns),
//     restore_ms (one restore of that size, median), recompute_ms (median), p99_over_restore,
//     kept (returns that found their whole history, of `returns`), committed_max_bytes (the
//     backend's committed bytes, highest seen after a request), committed_budget_bytes (the
//     weights plus P sessions), disk_bytes (every conversation's snapshot, at the end).
//
// Environment (defaults fit the 2-core CPU machine; the H200 run takes the sizes):
//   SIESTA_BENCH_MODEL          model spec (synthetic:small)
//   SIESTA_BENCH_CTX            context in tokens (2048)
//   SIESTA_BENCH_PARALLEL       P, sessions resident at once (4)
//   SIESTA_BENCH_CONVERSATIONS  N, conversations kept (32)
//   SIESTA_BENCH_HISTORY        H, tokens of history each (1024)
//   SIESTA_BENCH_RETURNS        timed returns (64)
//   SIESTA_BENCH_DIR            where the snapshots are written (a real disk; tmpfs makes
//                               fdatasync free)
//   SIESTA_BENCH_SEED           the order of the returns (printed; default: random)
//   SIESTA_BENCH_GAP_MS         a pause between two returns (0): a user's time to read and
//                               type, during which the writes ahead run; 0 sends the returns
//                               back to back, so each also competes with the last one's write
//
// The engine of many conversations runs its Offloaders' work on a thread of its own, as the
// server does: a session that goes idle is written ahead in the background, and its eviction
// later only releases it.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_engine_rig.h"
#include "bench/bench_env.h"
#include "bench/bench_stats.h"
#include "bench/bench_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Turn {
  double ms = 0;
  engine::GenerateResult result;
};

Result<Turn> timed(engine::Engine& engine, const std::string& prompt, engine::SessionRoute route) {
  engine::GenerateRequest request;
  request.prompt = prompt;
  request.max_tokens = 1;
  request.route = route;
  const auto start = Clock::now();
  Result<engine::GenerateResult> result = engine.generate(std::move(request)).get();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!result.ok()) return result.status();
  return Turn{ms, std::move(result).value()};
}

engine::SessionRoute key_of(uint64_t conversation) {
  return engine::route_by_key("conversation-" + std::to_string(conversation));
}

void conversations(benchmark::State& state, const std::string& backend) {
  const std::string spec = env_text("SIESTA_BENCH_MODEL", "synthetic:small");
  const uint32_t context = static_cast<uint32_t>(env_number("SIESTA_BENCH_CTX", 2048));
  const uint32_t parallel = static_cast<uint32_t>(env_number("SIESTA_BENCH_PARALLEL", 4));
  const uint32_t count = static_cast<uint32_t>(env_number("SIESTA_BENCH_CONVERSATIONS", 32));
  const uint64_t history = env_number("SIESTA_BENCH_HISTORY", 1024);
  const uint64_t returns = env_number("SIESTA_BENCH_RETURNS", 64);
  const uint64_t seed = env_number("SIESTA_BENCH_SEED", std::random_device{}());
  const uint64_t gap_ms = env_number("SIESTA_BENCH_GAP_MS", 0);
  std::printf(
      "conversations_bench: %s %s ctx %u, P %u, N %u, history %llu, returns %llu, "
      "gap %llu ms, seed %llu\n",
      backend.c_str(), spec.c_str(), context, parallel, count,
      static_cast<unsigned long long>(history), static_cast<unsigned long long>(returns),
      static_cast<unsigned long long>(gap_ms), static_cast<unsigned long long>(seed));
  Result<engine::ModelConfig> config = engine::model_config_from_spec(spec, context, std::nullopt);
  if (!config.ok()) return state.SkipWithError(config.status().to_string().c_str());
  if (history + 16 >= context) return state.SkipWithError("SIESTA_BENCH_HISTORY must fit the ctx");
  const std::string base = bench_base_dir();

  for (auto _ : state) {
    // One restore of that size, and a recompute, on a single-session engine.
    std::vector<double> restore_ms, recompute_ms;
    {
      EngineRig single;
      if (Status made = make_engine_rig(backend, *config, true, true,
                                        bench_store_dir(base, "conversations-single"), single);
          !made.ok()) {
        return state.SkipWithError(made.to_string().c_str());
      }
      for (int round = 0; round < 3; ++round) {
        std::string prompt = "single " + std::to_string(round) + ": ";
        pad_prompt(prompt, history);
        Result<Turn> fresh = timed(single.engine(), prompt, {});
        if (!fresh.ok()) return state.SkipWithError(fresh.status().to_string().c_str());
        recompute_ms.push_back(fresh->ms);
        Result<OffloadStatus> saved = save_now(single);
        if (!saved.ok()) return state.SkipWithError(saved.status().to_string().c_str());
        Result<Turn> back = timed(single.engine(), prompt + fresh->result.text + "!", {});
        if (!back.ok()) return state.SkipWithError(back.status().to_string().c_str());
        restore_ms.push_back(back->ms);
      }
    }

    EngineRig rig;
    engine::EngineSessions sessions;
    sessions.parallel = parallel;
    sessions.max_sessions = count;
    if (Status made = make_engine_rig(backend, *config, true, true,
                                      bench_store_dir(base, "conversations"), rig, sessions,
                                      /*background=*/true);
        !made.ok()) {
      return state.SkipWithError(made.to_string().c_str());
    }
    engine::Engine& engine = rig.engine();
    const uint64_t one_session = rig.stack->backend().stats().committed_bytes;
    uint64_t second_session = 0, committed_max = one_session;
    auto sample = [&] {
      const uint64_t committed = rig.stack->backend().stats().committed_bytes;
      if (second_session == 0 && committed > one_session) second_session = committed - one_session;
      committed_max = std::max(committed_max, committed);
    };
    std::vector<std::string> kept(count);
    for (uint32_t c = 0; c < count; ++c) {
      std::string prompt = "conversation " + std::to_string(c) + ": ";
      pad_prompt(prompt, history);
      Result<Turn> first = timed(engine, prompt, key_of(c));
      if (!first.ok()) return state.SkipWithError(first.status().to_string().c_str());
      kept[c] = prompt + first->result.text;
      sample();
    }
    std::mt19937_64 random(seed);
    std::vector<double> ttft;
    uint64_t found = 0;
    for (uint64_t r = 0; r < returns; ++r) {
      const uint32_t c = static_cast<uint32_t>(random() % count);
      if (kept[c].size() + 4 >= context) continue;
      // The user's pause, not a synchronisation: the engine is not waited for.
      if (gap_ms != 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
      const std::string prompt = kept[c] + "?";
      Result<Turn> back = timed(engine, prompt, key_of(c));
      if (!back.ok()) return state.SkipWithError(back.status().to_string().c_str());
      ttft.push_back(back->ms);
      if (back->result.cached_tokens == kept[c].size() - 1) ++found;
      kept[c] = prompt + back->result.text;
      sample();
    }
    uint64_t disk = 0;
    for (const engine::SessionStatus& s : engine.sessions()) disk += s.disk_bytes;

    const double p50 = percentile(ttft, 0.50), p99 = percentile(ttft, 0.99);
    const double restore = percentile(restore_ms, 0.5), recompute = percentile(recompute_ms, 0.5);
    state.SetIterationTime(p99 / 1000);
    state.counters["ttft_p50_ms"] = p50;
    state.counters["ttft_p99_ms"] = p99;
    state.counters["ttft_p90_ms"] = percentile(ttft, 0.90);
    // Where the slowest returns fell: right after the fill (its writes ahead still queued) or
    // in the steady state.
    const auto slowest = std::max_element(ttft.begin(), ttft.end());
    state.counters["ttft_max_ms"] = slowest != ttft.end() ? *slowest : 0;
    state.counters["slowest_return"] =
        static_cast<double>(slowest != ttft.end() ? slowest - ttft.begin() : 0);
    double first_half = 0;
    for (size_t i = 0; i < ttft.size() / 2; ++i) first_half = std::max(first_half, ttft[i]);
    state.counters["ttft_max_first_half_ms"] = first_half;
    state.counters["ttft_p99_second_half_ms"] =
        percentile(std::vector<double>(ttft.begin() + static_cast<std::ptrdiff_t>(ttft.size() / 2),
                                       ttft.end()),
                   0.99);
    state.counters["restore_ms"] = restore;
    state.counters["recompute_ms"] = recompute;
    state.counters["p99_over_restore"] = restore > 0 ? p99 / restore : 0;
    state.counters["returns"] = static_cast<double>(ttft.size());
    state.counters["kept"] = static_cast<double>(found);
    state.counters["evictions"] = static_cast<double>(engine.status().evictions);
    state.counters["saves_ahead"] = static_cast<double>(engine.cache_status().counters.saves_ahead);
    state.counters["delta_saves"] = static_cast<double>(engine.cache_status().counters.delta_saves);
    state.counters["committed_max_bytes"] = static_cast<double>(committed_max);
    state.counters["committed_budget_bytes"] =
        static_cast<double>(one_session + (parallel - 1) * second_session);
    state.counters["disk_bytes"] = static_cast<double>(disk);
  }
}

}  // namespace
}  // namespace siesta::bench

int main(int argc, char** argv) {
  for (const std::string& backend : siesta::bench::engine_backends("conversations_bench")) {
    const std::string spec = siesta::bench::env_text("SIESTA_BENCH_MODEL", "synthetic:small");
    std::string name = "conversations/";
    name += backend;
    name += "/";
    name += spec;
    benchmark::RegisterBenchmark(name.c_str(), siesta::bench::conversations, backend)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
