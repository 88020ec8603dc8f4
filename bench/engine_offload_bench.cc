// What idle offload costs a user of the reference engine, per backend: the time to the first
// token of a request on a resident, a restored and a lost snapshot; the decode speed with the
// Offloader in the command path against none; and how the snapshot grows with the history.
// Every figure is a Google Benchmark counter, so --benchmark_format=json (or --benchmark_out=
// FILE --benchmark_out_format=json) gives a plot script what it needs.
//
//   ttft/<backend>/<model>/history:N          N = 1024, 4096, 16384 tokens of history (or
//                                             SIESTA_BENCH_HISTORIES)
//     resident_ms   the history is resident; a request extends it by two tokens (the previous
//                   answer and "x") with max_tokens 1: generate() to the future's result
//     restored_ms   the same after Engine::offload_now() and the save it posts: the request
//                   restores the snapshot first (admission.restored)
//     fallback_ms   the same after the snapshot files were deleted: the restore falls back with
//                   NotFound and the whole prompt is read again (which also refills the history);
//                   not measured with SIESTA_BENCH_RAM_MIB (a copy in RAM has no file to lose)
//     ram_restores  how many of the restored requests read their snapshot from the RAM tier
//                   (with SIESTA_BENCH_RAM_MIB: a save finding the tier's memory not yet
//                   pinned goes to disk; one untimed save and return before the measured
//                   ones gives the pool time to prepare room for that size)
//     history_tokens, snapshot_bytes (cache_status().disk_bytes after the save),
//     session_device_bytes / session_host_bytes (released by the save), save_ms / restore_ms
//     (the Offloader's own timings). Each *_ms counter is the median over the iterations;
//     the benchmark's own time is the restored request's (manual time, so their mean).
//   decode_offload/<backend>/<model>
//     tok_s_on, tok_s_off  generated tokens per second of a 256-token answer to a short prompt
//                          (reset first, not timed), with EngineOptions::offload set (idle
//                          3600 s: it stays resident, but every command goes through the
//                          Offloader's acquire/release) and without; medians over rounds, each
//                          with a fresh pair of engines, alternating which runs first
//     ratio                tok_s_on / tok_s_off (target: >= 0.99)
//   snapshot_bytes/<backend>/<model>/tokens:N  N = 256 ... 16384, below the context
//     tokens, snapshot_bytes, session_bytes (device bytes released by the save),
//     session_host_bytes, save_ms, restore_ms: one session filled progressively, saved at
//     each N and restored by the next request; the benchmark's time is the save (manual time)
//
// Backends: "host" (HostKernels on the SimBackend) always; "cuda" (CudaKernels on the
// CudaVmmBackend) where the build has CUDA and a device is present.
//
// Environment:
//   SIESTA_BENCH_MODEL  model spec (default synthetic:small)
//   SIESTA_BENCH_CTX    context in tokens (default 20480: room for 16k of history)
//   SIESTA_BENCH_DIR    where the snapshot directory siesta-engine-offload-bench is made
//                       (default /tmp; choose a real disk: tmpfs makes fdatasync free)
//   SIESTA_BENCH_HISTORIES       ttft's histories, comma-separated (default 1024,4096,16384;
//                                those that do not fit the context are left out)
//   SIESTA_BENCH_TTFT_ITERATIONS ttft's iterations (default 3, and 2 from 16k tokens)
//
// Prefill reads the prompt in blocks (engine/session.h), but each token still attends to the
// whole history, so a fill, and each fallback, costs the square of its length. Iterations are
// therefore few and fixed; filter with --benchmark_filter (e.g.
// 'history:(1024|4096)|decode|tokens:(256|1024|2048|4096)/') for a quick look.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_engine_rig.h"
#include "bench/bench_env.h"
#include "bench/bench_stats.h"
#include "bench/bench_store.h"
#include "engine/engine.h"
#include "engine/model_config.h"

namespace siesta::bench {
namespace {

struct BenchConfig {
  std::string spec;
  engine::ModelConfig model;
  std::string dir;  // the snapshot store's directory
};

void fail(benchmark::State& state, const Status& status) {
  state.SkipWithError(status.to_string().c_str());
}

// One request and how long its future took, from the generate() call to the result.
struct Turn {
  engine::GenerateResult result;
  double ms = 0;
};

Result<Turn> timed_generate(engine::Engine& engine, std::string prompt, uint32_t max_tokens) {
  engine::GenerateRequest request;
  request.prompt = std::move(prompt);
  request.max_tokens = max_tokens;
  const auto start = std::chrono::steady_clock::now();
  Result<engine::GenerateResult> result = engine.generate(std::move(request)).get();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!result.ok()) return result.status();
  return Turn{std::move(result).value(), ms};
}

// The conversation so far (every prompt and answer), so that the next request extends the
// session's history by a few tokens, as a chat client's next message would: the history holds
// the prompt, the request adds the one answered token and "x", and asks for one token.
struct Conversation {
  std::string text;

  Result<Turn> next(engine::Engine& engine) {
    std::string prompt = text + "x";
    SIESTA_ASSIGN_OR_RETURN(Turn turn, timed_generate(engine, prompt, 1));
    text = std::move(prompt) + turn.result.text;
    return turn;
  }

  // Extends the conversation with filler until the prompt has `tokens` tokens, then asks for
  // one token: the history then holds exactly `tokens`.
  Result<Turn> fill_to(engine::Engine& engine, size_t tokens) {
    std::string prompt = text;
    pad_prompt(prompt, tokens);
    SIESTA_ASSIGN_OR_RETURN(Turn turn, timed_generate(engine, prompt, 1));
    text = std::move(prompt) + turn.result.text;
    return turn;
  }
};

Status expect_resident(const engine::Engine& engine) {
  const OffloadStatus status = engine.cache_status();
  if (status.state != OffloadState::kResident) {
    return Internal("expected a resident session, found " +
                    std::string(offload_state_name(status.state)));
  }
  return Status::Ok();
}

void ttft(benchmark::State& state, const BenchConfig& config, const std::string& backend,
          uint32_t history) {
  EngineRig rig;
  if (Status made = make_engine_rig(backend, config.model, /*offload_on=*/true,
                                    /*encrypt=*/true, config.dir, rig);
      !made.ok()) {
    return fail(state, made);
  }
  engine::Engine& engine = rig.engine();
  Conversation chat;
  if (Result<Turn> filled = chat.fill_to(engine, history); !filled.ok()) {
    return fail(state, filled.status());
  }
  // One save and return, not timed: the bench saves as soon as a command ends, before a fresh
  // RAM tier's pool has pinned the room the command's end announced (a server saves after
  // --cache-idle-seconds), so without this the first measured restore could be a disk one.
  if (Result<OffloadStatus> warm = save_now(rig); !warm.ok()) return fail(state, warm.status());
  if (Result<Turn> back = chat.next(engine); !back.ok()) return fail(state, back.status());

  std::vector<double> resident_ms, restored_ms, fallback_ms, save_ms, restore_ms;
  uint64_t snapshot_bytes = 0, device_bytes = 0, host_bytes = 0, ram_restores = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    // Resident: the history is on the device; only the two new tokens and one decode step.
    if (Status s = expect_resident(engine); !s.ok()) return fail(state, s);
    Result<Turn> resident = chat.next(engine);
    if (!resident.ok()) return fail(state, resident.status());
    if (resident->result.admission.restored || resident->result.admission.fallback) {
      return fail(state, Internal("a resident session was restored or fell back"));
    }
    resident_ms.push_back(resident->ms);

    // Restored: saved and released first, so the request reads the snapshot back.
    Result<OffloadStatus> saved = save_now(rig);
    if (!saved.ok()) return fail(state, saved.status());
    snapshot_bytes = saved->disk_bytes;
    device_bytes = saved->released_vram_bytes;
    host_bytes = saved->released_host_bytes;
    save_ms.push_back(saved->last_save_ms);
    Result<Turn> restored = chat.next(engine);
    if (!restored.ok()) return fail(state, restored.status());
    if (!restored->result.admission.restored) {
      return fail(state, Internal("the request did not restore the snapshot: " +
                                  engine.cache_status().last_error));
    }
    restored_ms.push_back(restored->ms);
    if (saved->state == OffloadState::kRam) ++ram_restores;
    restore_ms.push_back(engine.cache_status().last_restore_ms);
    state.SetIterationTime(restored->ms / 1e3);

    // Fallback: saved, then the file lost, so the restore finds nothing and the whole prompt
    // is read again; that request also leaves the history full for the next iteration. A
    // snapshot in the RAM tier has no file to lose: the recompute is the disk run's, and the
    // restored request already left the history full.
    if (saved->state == OffloadState::kRam) continue;
    saved = save_now(rig);
    if (!saved.ok()) return fail(state, saved.status());
    if (saved->state == OffloadState::kRam) {
      // This save went to the RAM tier: no file to lose. A turn brings the history back.
      if (Result<Turn> back = chat.next(engine); !back.ok()) return fail(state, back.status());
      continue;
    }
    Result<uint64_t> deleted = delete_snapshots(rig);
    if (!deleted.ok()) return fail(state, deleted.status());
    if (*deleted == 0) return fail(state, Internal("no snapshot file to delete"));
    Result<Turn> fallback = chat.next(engine);
    if (!fallback.ok()) return fail(state, fallback.status());
    if (!fallback->result.admission.fallback) {
      return fail(state, Internal("the request did not fall back"));
    }
    if (*fallback->result.admission.fallback != FallbackReason::kNotFound) {
      return fail(state,
                  Internal("fell back for " +
                           std::string(fallback_reason_name(*fallback->result.admission.fallback)) +
                           ", not not_found"));
    }
    fallback_ms.push_back(fallback->ms);
  }
  state.counters["history_tokens"] = history;
  state.counters["resident_ms"] = median(resident_ms);
  state.counters["restored_ms"] = median(restored_ms);
  if (!fallback_ms.empty()) state.counters["fallback_ms"] = median(fallback_ms);
  state.counters["save_ms"] = median(save_ms);
  state.counters["ram_restores"] = static_cast<double>(ram_restores);
  state.counters["restore_ms"] = median(restore_ms);
  state.counters["snapshot_bytes"] = static_cast<double>(snapshot_bytes);
  state.counters["session_device_bytes"] = static_cast<double>(device_bytes);
  state.counters["session_host_bytes"] = static_cast<double>(host_bytes);
}

constexpr uint32_t kDecodeTokens = 256;
constexpr int kDecodeRounds = 12;  // a multiple of 4: see decode_offload
const char kDecodePrompt[] = "Once upon a time";

// Generated tokens per second of one answer, on a reset session (the reset is not timed).
Result<double> decode_tokens_per_s(engine::Engine& engine) {
  SIESTA_RETURN_IF_ERROR(engine.reset().get());
  SIESTA_ASSIGN_OR_RETURN(Turn turn, timed_generate(engine, kDecodePrompt, kDecodeTokens));
  if (turn.result.completion_tokens == 0) return Internal("no token generated");
  return turn.result.completion_tokens / (turn.ms / 1e3);
}

void decode_offload(benchmark::State& state, const BenchConfig& config,
                    const std::string& backend) {
  std::vector<double> tok_s_on, tok_s_off;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    for (int round = 0; round < kDecodeRounds; ++round) {
      // Fresh engines every round, both alive together: one engine can run a few percent
      // faster than an identical one for where its memory landed (seen here: up to 15%
      // between two instances, either way), so a pair made once would measure placement, not
      // the offloader. Which goes first alternates, so neither always follows the other.
      // Which is created first alternates too, every other round, so that every pairing of
      // creation order and run order comes up equally often: the first engine's memory lands
      // first, which alone can make one engine a few percent faster.
      EngineRig on, off;
      const bool on_first = round % 2 == 0;
      const bool on_created_first = round / 2 % 2 == 0;
      for (bool offload_on : {on_created_first, !on_created_first}) {
        if (Status made = make_engine_rig(backend, config.model, offload_on, /*encrypt=*/true,
                                          config.dir, offload_on ? on : off);
            !made.ok()) {
          return fail(state, made);
        }
      }
      EngineRig* first = on_first ? &on : &off;
      EngineRig* second = on_first ? &off : &on;
      // One untimed answer each first: first-touch page faults and caches.
      for (EngineRig* rig : {first, second}) {
        if (Result<double> warm = decode_tokens_per_s(rig->engine()); !warm.ok()) {
          return fail(state, warm.status());
        }
      }
      for (EngineRig* rig : {first, second}) {
        Result<double> tok_s = decode_tokens_per_s(rig->engine());
        if (!tok_s.ok()) return fail(state, tok_s.status());
        (rig == &on ? tok_s_on : tok_s_off).push_back(*tok_s);
      }
      if (Status s = expect_resident(on.engine()); !s.ok()) return fail(state, s);
    }
  }
  const double on_median = median(tok_s_on);
  const double off_median = median(tok_s_off);
  state.counters["tok_s_on"] = on_median;
  state.counters["tok_s_off"] = off_median;
  state.counters["ratio"] = off_median > 0 ? on_median / off_median : 0;
  state.counters["rounds"] = kDecodeRounds;
  state.counters["decode_tokens"] = kDecodeTokens;
}

// One session filled progressively across the snapshot_bytes benchmarks of a backend (run in
// registration order: each extends the history to its N). A benchmark run alone, or after a
// larger N, starts a fresh session.
struct SnapshotSeries {
  BenchConfig config;
  std::string backend;
  uint32_t last_tokens = 0;  // the session is freed after the benchmark of this N
  std::unique_ptr<EngineRig> rig;
  Conversation chat;
};

void snapshot_bytes(benchmark::State& state, const std::shared_ptr<SnapshotSeries>& series,
                    uint32_t tokens) {
  if (series->rig != nullptr && series->chat.text.size() >= tokens) series->rig.reset();
  if (series->rig == nullptr) {
    series->rig = std::make_unique<EngineRig>();
    series->chat = Conversation{};
    if (Status made = make_engine_rig(series->backend, series->config.model, /*offload_on=*/true,
                                      /*encrypt=*/true, series->config.dir, *series->rig);
        !made.ok()) {
      series->rig.reset();
      return fail(state, made);
    }
  }
  EngineRig& rig = *series->rig;
  OffloadStatus saved_status;
  double restore_ms = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): the benchmark loop
    Result<Turn> filled = series->chat.fill_to(rig.engine(), tokens);
    if (!filled.ok()) return fail(state, filled.status());
    Result<OffloadStatus> saved = save_now(rig);
    if (!saved.ok()) return fail(state, saved.status());
    saved_status = *saved;
    if (saved_status.tokens != tokens) {
      return fail(state, Internal("saved " + std::to_string(saved_status.tokens) +
                                  " tokens, expected " + std::to_string(tokens)));
    }
    state.SetIterationTime(saved_status.last_save_ms / 1e3);
    // The next request restores it (and checks that the snapshot is usable).
    Result<Turn> restored = series->chat.next(rig.engine());
    if (!restored.ok()) return fail(state, restored.status());
    if (!restored->result.admission.restored) {
      return fail(state, Internal("the request did not restore the snapshot: " +
                                  rig.engine().cache_status().last_error));
    }
    restore_ms = rig.engine().cache_status().last_restore_ms;
  }
  state.counters["tokens"] = static_cast<double>(saved_status.tokens);
  state.counters["snapshot_bytes"] = static_cast<double>(saved_status.disk_bytes);
  state.counters["session_bytes"] = static_cast<double>(saved_status.released_vram_bytes);
  state.counters["session_host_bytes"] = static_cast<double>(saved_status.released_host_bytes);
  state.counters["save_ms"] = saved_status.last_save_ms;
  state.counters["restore_ms"] = restore_ms;
  if (tokens >= series->last_tokens) series->rig.reset();
}

}  // namespace
}  // namespace siesta::bench

int main(int argc, char** argv) {
  using namespace siesta::bench;
  BenchConfig config;
  config.spec = env_text("SIESTA_BENCH_MODEL", "synthetic:small");
  const std::string ctx_text = env_text("SIESTA_BENCH_CTX", "20480");
  char* ctx_end = nullptr;
  const unsigned long ctx = std::strtoul(ctx_text.c_str(), &ctx_end, 10);
  if (ctx_end == ctx_text.c_str() || *ctx_end != '\0' || ctx == 0 || ctx > UINT32_MAX) {
    std::fprintf(stderr, "engine_offload_bench: SIESTA_BENCH_CTX=%s is not a token count\n",
                 ctx_text.c_str());
    return 2;
  }
  siesta::Result<siesta::engine::ModelConfig> model =
      siesta::engine::model_config_from_spec(config.spec, static_cast<uint32_t>(ctx));
  if (!model.ok()) {
    std::fprintf(stderr, "engine_offload_bench: %s\n", model.status().to_string().c_str());
    return 2;
  }
  config.model = *model;
  config.dir = bench_store_dir(bench_base_dir(), "siesta-engine-offload-bench");

  std::vector<uint32_t> histories;
  for (const uint64_t history : env_numbers("SIESTA_BENCH_HISTORIES", "1024,4096,16384")) {
    histories.push_back(static_cast<uint32_t>(history));
  }
  const auto ttft_iterations = static_cast<int>(env_number("SIESTA_BENCH_TTFT_ITERATIONS", 0));

  // Room for the requests that follow the fill: each iteration adds a few tokens.
  constexpr uint32_t kHeadroom = 64;
  const uint32_t context = config.model.context;
  std::vector<std::shared_ptr<SnapshotSeries>> series_list;
  for (const std::string& backend : engine_backends("engine_offload_bench")) {
    const std::string suffix = "/" + backend + "/" + config.spec;
    for (uint32_t history : histories) {
      if (history + kHeadroom > context) continue;
      benchmark::RegisterBenchmark(
          ("ttft" + suffix + "/history:" + std::to_string(history)).c_str(), ttft, config, backend,
          history)
          ->Unit(benchmark::kMillisecond)
          ->UseManualTime()
          ->Iterations(ttft_iterations > 0 ? ttft_iterations : (history >= 16384 ? 2 : 3));
    }
    if (std::string(kDecodePrompt).size() + kDecodeTokens <= context) {
      benchmark::RegisterBenchmark(("decode_offload" + suffix).c_str(), decode_offload, config,
                                   backend)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime()
          ->Iterations(1);
    }
    auto series = std::make_shared<SnapshotSeries>();
    series->config = config;
    series->backend = backend;
    std::vector<uint32_t> sizes;
    for (uint32_t tokens : {256u, 1024u, 2048u, 4096u, 8192u, 16384u}) {
      if (tokens + kHeadroom <= context) sizes.push_back(tokens);
    }
    if (!sizes.empty()) series->last_tokens = sizes.back();
    for (uint32_t tokens : sizes) {
      benchmark::RegisterBenchmark(
          ("snapshot_bytes" + suffix + "/tokens:" + std::to_string(tokens)).c_str(), snapshot_bytes,
          series, tokens)
          ->Unit(benchmark::kMillisecond)
          ->UseManualTime()
          ->Iterations(1);
    }
    series_list.push_back(series);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // A filtered run may leave a series' session open: stop it before the statics go.
  for (const std::shared_ptr<SnapshotSeries>& series : series_list) series->rig.reset();
  return 0;
}
