// Conversations across a restart (--cache-persist on): what a start costs with many
// conversations to adopt, and what the first adopted conversation's return costs, beside the
// baselines measured in the same run.
//
//   restart_startup/<backend>/<model>   counters: startup_ms (opening the stack, adoption of
//     N conversations included: what a server does before it answers /health), empty_ms (the
//     same stack opened on an empty directory), startup_over_empty, adopted (of N),
//     first_return_ms (the first adopted conversation's next turn: its restore, to the first
//     token), recompute_ms (a fresh conversation of the same prompt length, same engine),
//     recompute_over_return.
//   restart_ttft/<backend>/<model>      one conversation of L tokens kept across a clean
//     restart: adopted_ttft_ms (its next turn after the restart), recompute_ms (the same
//     prompt read by a fresh conversation, same engine), recompute_over_adopted.
//
// Environment (defaults fit the 2-core CPU machine; the H200 run sets the sizes):
//   SIESTA_BENCH_MODEL          model spec (synthetic:tiny for the start-up, small for TTFT)
//   SIESTA_BENCH_CTX            context in tokens (2048)
//   SIESTA_BENCH_CONVERSATIONS  N, conversations to adopt (1000)
//   SIESTA_BENCH_HISTORY        their tokens of history each (256)
//   SIESTA_BENCH_LONG           L, the long conversation's tokens (1536)
//   SIESTA_BENCH_DIR            where the snapshots are written (a real disk)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "bench/bench_engine_rig.h"
#include "bench/bench_env.h"
#include "bench/bench_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// One turn of one token, timed to its answer. Failure: the engine's.
Result<std::pair<double, engine::GenerateResult>> timed_turn(engine::Engine& engine,
                                                             const std::string& prompt,
                                                             const std::string& key) {
  engine::GenerateRequest request;
  request.prompt = prompt;
  request.max_tokens = 1;
  request.route = engine::route_by_key(key);
  const auto start = Clock::now();
  Result<engine::GenerateResult> result = engine.generate(std::move(request)).get();
  if (!result.ok()) return result.status();
  return std::make_pair(ms_since(start), std::move(result).value());
}

std::string padded(const std::string& head, uint64_t tokens) {
  std::string prompt = head;
  pad_prompt(prompt, tokens);
  return prompt;
}

// A persisting rig on `dir` with `key_file`, N conversations kept, one resident.
Status open_persisting(const std::string& backend, const engine::ModelConfig& config,
                       const std::string& dir, const std::string& key_file, uint32_t count,
                       EngineRig& rig) {
  engine::EngineSessions sessions;
  sessions.parallel = 1;
  sessions.max_sessions = count;
  return make_engine_rig(backend, config, true, true, dir, rig, sessions, /*background=*/true,
                         key_file);
}

void restart_startup(benchmark::State& state, const std::string& backend) {
  const std::string spec = env_text("SIESTA_BENCH_MODEL", "synthetic:tiny");
  const uint32_t context = static_cast<uint32_t>(env_number("SIESTA_BENCH_CTX", 2048));
  const uint32_t count = static_cast<uint32_t>(env_number("SIESTA_BENCH_CONVERSATIONS", 1000));
  const uint64_t history = env_number("SIESTA_BENCH_HISTORY", 256);
  std::printf("restart_bench: %s %s ctx %u, %u conversations of %llu tokens\n", backend.c_str(),
              spec.c_str(), context, count, static_cast<unsigned long long>(history));
  Result<engine::ModelConfig> config = engine::model_config_from_spec(spec, context, std::nullopt);
  if (!config.ok()) return state.SkipWithError(config.status().to_string().c_str());
  const std::string base = bench_base_dir();
  for (auto _ : state) {
    const std::string dir = bench_store_dir(base, "restart-startup");
    const std::string empty_dir = bench_store_dir(base, "restart-empty");
    const std::string key = base + "/restart-bench.key";
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(empty_dir);
    std::filesystem::remove(key);
    {
      EngineRig before;
      if (Status made = open_persisting(backend, *config, dir, key, count, before); !made.ok()) {
        return state.SkipWithError(made.to_string().c_str());
      }
      for (uint32_t c = 0; c < count; ++c) {
        Result<std::pair<double, engine::GenerateResult>> turn =
            timed_turn(before.engine(), padded("conversation " + std::to_string(c) + ": ", history),
                       "user-" + std::to_string(c));
        if (!turn.ok()) return state.SkipWithError(turn.status().to_string().c_str());
      }
    }  // the close saves the last resident one; every conversation is on disk
    double empty_ms = 0;
    {
      EngineRig empty;
      const auto start = Clock::now();
      if (Status made = open_persisting(backend, *config, empty_dir, key, count, empty);
          !made.ok()) {
        return state.SkipWithError(made.to_string().c_str());
      }
      empty_ms = ms_since(start);
    }
    EngineRig after;
    const auto start = Clock::now();
    if (Status made = open_persisting(backend, *config, dir, key, count, after); !made.ok()) {
      return state.SkipWithError(made.to_string().c_str());
    }
    const double startup_ms = ms_since(start);
    const engine::AdoptionReport adoption = after.engine().status().adoption;
    // The most recent conversation, and a fresh one of the same length.
    const uint32_t last = count - 1;
    const std::string prompt = padded("conversation " + std::to_string(last) + ": ", history) + "!";
    Result<std::pair<double, engine::GenerateResult>> back =
        timed_turn(after.engine(), prompt, "user-" + std::to_string(last));
    if (!back.ok()) return state.SkipWithError(back.status().to_string().c_str());
    Result<std::pair<double, engine::GenerateResult>> fresh =
        timed_turn(after.engine(), padded("a fresh one: ", prompt.size()), "fresh");
    if (!fresh.ok()) return state.SkipWithError(fresh.status().to_string().c_str());
    state.SetIterationTime(startup_ms / 1e3);
    state.counters["startup_ms"] = startup_ms;
    state.counters["empty_ms"] = empty_ms;
    state.counters["startup_over_empty"] = startup_ms / empty_ms;
    state.counters["adopted"] = static_cast<double>(adoption.adopted);
    state.counters["first_return_ms"] = back->first;
    state.counters["first_return_cached"] = back->second.cached_tokens;
    state.counters["recompute_ms"] = fresh->first;
    state.counters["recompute_over_return"] = fresh->first / back->first;
  }
}

void restart_ttft(benchmark::State& state, const std::string& backend) {
  const std::string spec = env_text("SIESTA_BENCH_MODEL", "synthetic:small");
  const uint32_t context = static_cast<uint32_t>(env_number("SIESTA_BENCH_CTX", 2048));
  const uint64_t tokens = env_number("SIESTA_BENCH_LONG", 1536);
  Result<engine::ModelConfig> config = engine::model_config_from_spec(spec, context, std::nullopt);
  if (!config.ok()) return state.SkipWithError(config.status().to_string().c_str());
  if (tokens + 16 >= context) return state.SkipWithError("SIESTA_BENCH_LONG must fit the ctx");
  const std::string base = bench_base_dir();
  for (auto _ : state) {
    const std::string dir = bench_store_dir(base, "restart-ttft");
    const std::string key = base + "/restart-ttft.key";
    std::filesystem::remove_all(dir);
    std::filesystem::remove(key);
    const std::string prompt = padded("the long one: ", tokens);
    std::string next;
    {
      EngineRig before;
      if (Status made = open_persisting(backend, *config, dir, key, 4, before); !made.ok()) {
        return state.SkipWithError(made.to_string().c_str());
      }
      Result<std::pair<double, engine::GenerateResult>> first =
          timed_turn(before.engine(), prompt, "long");
      if (!first.ok()) return state.SkipWithError(first.status().to_string().c_str());
      next = prompt + first->second.text + "!";
    }
    EngineRig after;
    if (Status made = open_persisting(backend, *config, dir, key, 4, after); !made.ok()) {
      return state.SkipWithError(made.to_string().c_str());
    }
    Result<std::pair<double, engine::GenerateResult>> adopted =
        timed_turn(after.engine(), next, "long");
    if (!adopted.ok()) return state.SkipWithError(adopted.status().to_string().c_str());
    Result<std::pair<double, engine::GenerateResult>> fresh =
        timed_turn(after.engine(), padded("recomputed: ", next.size()), "fresh");
    if (!fresh.ok()) return state.SkipWithError(fresh.status().to_string().c_str());
    state.SetIterationTime(adopted->first / 1e3);
    state.counters["tokens"] = static_cast<double>(next.size());
    state.counters["adopted_ttft_ms"] = adopted->first;
    state.counters["adopted_cached"] = adopted->second.cached_tokens;
    state.counters["recompute_ms"] = fresh->first;
    state.counters["recompute_over_adopted"] = fresh->first / adopted->first;
  }
}

}  // namespace
}  // namespace siesta::bench

// "<what>/<backend>/<model>".
std::string bench_name(const char* what, const std::string& backend, const std::string& model) {
  std::string name = what;
  name += '/';
  name += backend;
  name += '/';
  name += model;
  return name;
}

int main(int argc, char** argv) {
  for (const std::string& backend : siesta::bench::engine_backends("restart_bench")) {
    const std::string tiny = siesta::bench::env_text("SIESTA_BENCH_MODEL", "synthetic:tiny");
    const std::string small = siesta::bench::env_text("SIESTA_BENCH_MODEL", "synthetic:small");
    benchmark::RegisterBenchmark(bench_name("restart_startup", backend, tiny).c_str(),
                                 siesta::bench::restart_startup, backend)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(bench_name("restart_ttft", backend, small).c_str(),
                                 siesta::bench::restart_ttft, backend)
        ->Iterations(1)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
