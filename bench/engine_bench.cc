// Prefill and decode speed of the reference engine on each backend. Tokens per second are
// Google Benchmark counters; run with --benchmark_format=json for docs/PERFORMANCE.md.
//
//   prefill/<backend>/<model>   a prompt of N tokens fed into an empty session the way the
//            engine reads it (Session::feed_block, blocks of the session's prefill_block())
//   prefill_history/<backend>/<model>/history:H   the prefill rate at H tokens of history:
//            the session is filled to H tokens once (not timed), then each round rolls back to
//            H (reuse_prefix, to the checkpoint at H) and feeds new tokens, alternately
//              block64_tok_s, block128_tok_s   in blocks of 64 and of 128 tokens,
//              token_tok_s      one token at a time through the decode graph (feed(): the
//                               per-token path every version before blocks used),
//            and block_tok_s is the block the engine uses (prefill_block: the kernels'
//            preference, 64 on the host and 128 on CUDA),
//            each timed to the next token's download; medians over the rounds, so every
//            ratio (block_ratio = block / token) compares runs of the same session, history
//            and process.
//   decode/<backend>/<model>    greedy generation: greedy_next + feed, one token at a time, on a
//            session already holding a prompt
//
// Backends: "host" (HostKernels on the SimBackend) always; "cuda" (CudaKernels on the
// CudaVmmBackend) where the build has CUDA and a device is present.
//
// Environment: SIESTA_BENCH_HISTORY_MODELS (default synthetic:small,synthetic:medium,
// synthetic:large) and SIESTA_BENCH_HISTORIES (default 1024,8192,32768) choose the
// prefill_history cases; SIESTA_BENCH_ROUNDS (default 3) their rounds. A history case's
// session has a context of H + 1024 tokens.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_engine_rig.h"
#include "bench/bench_env.h"
#include "bench/bench_stats.h"
#include "core/memory/host_vmm.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/session.h"

namespace siesta::bench {
namespace {

using engine::Token;

// One backend with its kernels, a model and a session, made once per benchmark.
struct Rig {
  std::unique_ptr<MemoryBackend> backend;
  std::unique_ptr<Kernels> kernels;
  HostVmm host;
  std::unique_ptr<engine::Model> model;
  std::unique_ptr<engine::Session> session;
};

Status make_rig(const std::string& backend_name, const engine::ModelConfig& config, Rig& rig) {
  SIESTA_RETURN_IF_ERROR(open_device(backend_name, rig.backend, rig.kernels));
  SIESTA_ASSIGN_OR_RETURN(rig.model, engine::Model::load(config, *rig.backend, *rig.kernels));
  SIESTA_ASSIGN_OR_RETURN(
      rig.session, engine::Session::create(*rig.model, *rig.backend, *rig.kernels, rig.host));
  return Status::Ok();
}

std::vector<Token> prompt_of(uint32_t tokens, uint32_t salt = 0) {
  std::vector<Token> prompt(tokens);
  for (uint32_t i = 0; i < tokens; ++i) {
    prompt[i] = static_cast<Token>('a' + (i * 7 + salt) % 26);
  }
  return prompt;
}

void fail(benchmark::State& state, const Status& status) {
  state.SkipWithError(status.to_string().c_str());
}

// Feeds tokens [from, end) in steps of at most `block` (1: feed(), the decode graph).
Status feed_range(engine::Session& session, std::span<const Token> tokens, uint32_t block) {
  for (size_t i = 0; i < tokens.size();) {
    if (block == 1) {
      SIESTA_RETURN_IF_ERROR(session.feed(tokens[i]));
      ++i;
      continue;
    }
    const size_t n = std::min<size_t>(block, tokens.size() - i);
    SIESTA_ASSIGN_OR_RETURN(uint32_t fed, session.feed_block(tokens.subspan(i, n)));
    i += fed;
  }
  return Status::Ok();
}

void prefill(benchmark::State& state, const std::string& backend, const std::string& spec,
             uint32_t tokens) {
  Rig rig;
  Result<engine::ModelConfig> config = engine::model_config_from_spec(spec);
  if (!config.ok()) return fail(state, config.status());
  if (Status made = make_rig(backend, *config, rig); !made.ok()) return fail(state, made);
  const std::vector<Token> prompt = prompt_of(tokens);
  for (auto _ : state) {
    if (Status s = rig.session->discard_history(); !s.ok()) return fail(state, s);
    Result<uint32_t> reused = rig.session->reuse_prefix(prompt);
    if (!reused.ok()) return fail(state, reused.status());
    const std::span<const Token> rest = std::span(prompt).subspan(*reused);
    if (Status s = feed_range(*rig.session, rest, rig.session->prefill_block()); !s.ok()) {
      return fail(state, s);
    }
    Result<Token> next = rig.session->greedy_next();  // waits for the device
    if (!next.ok()) return fail(state, next.status());
    benchmark::DoNotOptimize(*next);
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// One timed run of prefill_history: back to `history` tokens, then `tokens` new ones in
// steps of `block`. Returns tokens per second.
Result<double> timed_extension(Rig& rig, const std::vector<Token>& filled, uint32_t history,
                               uint32_t tokens, uint32_t block, uint32_t salt) {
  engine::Session& session = *rig.session;
  std::vector<Token> prompt(filled.begin(), filled.begin() + history);
  const std::vector<Token> suffix = prompt_of(tokens, salt);
  prompt.insert(prompt.end(), suffix.begin(), suffix.end());
  SIESTA_ASSIGN_OR_RETURN(uint32_t reused, session.reuse_prefix(prompt));
  if (reused != history) {
    return Internal("rolled back to " + std::to_string(reused) + " tokens, not " +
                    std::to_string(history));
  }
  SIESTA_RETURN_IF_ERROR(rig.kernels->synchronize());  // the rollback's upload is done
  const auto start = std::chrono::steady_clock::now();
  SIESTA_RETURN_IF_ERROR(feed_range(session, std::span(prompt).subspan(history), block));
  SIESTA_ASSIGN_OR_RETURN(Token next, session.greedy_next());
  benchmark::DoNotOptimize(next);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return tokens / seconds;
}

void prefill_history(benchmark::State& state, const std::string& backend, const std::string& spec,
                     uint32_t history, int rounds) {
  Result<engine::ModelConfig> named = engine::model_config_from_spec(spec, history + 1024);
  if (!named.ok()) return fail(state, named.status());
  engine::ModelConfig config = *named;
  config.prefill_block = engine::kMaxPrefillBlock;  // each run passes its own block size
  Rig rig;
  if (Status made = make_rig(backend, config, rig); !made.ok()) return fail(state, made);
  // The engine's block: the model's setting, or the kernels' preference.
  const uint32_t engine_block =
      named->prefill_block != 0 ? named->prefill_block : rig.kernels->preferred_prefill_block();
  const std::vector<Token> filled = prompt_of(history);
  const auto fill_start = std::chrono::steady_clock::now();
  if (Status s = feed_range(*rig.session, filled, engine::kMaxPrefillBlock); !s.ok()) {
    return fail(state, s);
  }
  if (Result<Token> t = rig.session->greedy_next(); !t.ok()) return fail(state, t.status());
  const double fill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();

  // Enough tokens for a few blocks; fewer one at a time, whose rate does not depend on the
  // count (each token costs the same at a given history).
  const uint32_t block_tokens = 4 * engine::kMaxPrefillBlock;
  const uint32_t token_tokens = history >= 16384 ? 16 : 32;
  std::vector<double> block64_rate, block128_rate, token_rate;
  for (auto _ : state) {
    for (int round = 0; round < rounds; ++round) {
      Result<double> b64 = timed_extension(rig, filled, history, block_tokens, 64, 3 * round + 1);
      if (!b64.ok()) return fail(state, b64.status());
      block64_rate.push_back(*b64);
      Result<double> b128 = timed_extension(rig, filled, history, block_tokens, 128, 3 * round + 2);
      if (!b128.ok()) return fail(state, b128.status());
      block128_rate.push_back(*b128);
      Result<double> t = timed_extension(rig, filled, history, token_tokens, 1, 3 * round + 3);
      if (!t.ok()) return fail(state, t.status());
      token_rate.push_back(*t);
    }
  }
  const double block64 = median(block64_rate), block128 = median(block128_rate);
  const double token = median(token_rate);
  const double block = engine_block == 128 ? block128 : block64;
  state.counters["history"] = history;
  state.counters["prefill_block"] = engine_block;
  state.counters["block_tok_s"] = block;
  state.counters["block64_tok_s"] = block64;
  state.counters["block128_tok_s"] = block128;
  state.counters["token_tok_s"] = token;
  state.counters["block_ratio"] = block / token;
  state.counters["fill_s"] = fill_s;
}

void decode(benchmark::State& state, const std::string& backend, const std::string& spec,
            uint32_t tokens) {
  Rig rig;
  Result<engine::ModelConfig> config = engine::model_config_from_spec(spec);
  if (!config.ok()) return fail(state, config.status());
  if (Status made = make_rig(backend, *config, rig); !made.ok()) return fail(state, made);
  const std::vector<Token> prompt = prompt_of(16);
  for (auto _ : state) {
    state.PauseTiming();
    if (Status s = rig.session->discard_history(); !s.ok()) return fail(state, s);
    for (Token t : prompt) {
      if (Status s = rig.session->feed(t); !s.ok()) return fail(state, s);
    }
    state.ResumeTiming();
    for (uint32_t i = 0; i < tokens; ++i) {
      Result<Token> next = rig.session->greedy_next();
      if (!next.ok()) return fail(state, next.status());
      if (Status s = rig.session->feed(*next); !s.ok()) return fail(state, s);
    }
    Result<Token> last = rig.session->greedy_next();
    if (!last.ok()) return fail(state, last.status());
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

}  // namespace
}  // namespace siesta::bench

int main(int argc, char** argv) {
  using namespace siesta::bench;
  const std::vector<std::string> backends = engine_backends("engine_bench");
  struct Case {
    const char* spec;
    uint32_t prefill_tokens;
    uint32_t decode_tokens;
  };
  const Case cases[] = {
      {"synthetic:tiny", 128, 64}, {"synthetic:small", 512, 64}, {"synthetic:medium", 256, 32}};
  const std::vector<std::string> history_models =
      env_items("SIESTA_BENCH_HISTORY_MODELS", "synthetic:small,synthetic:medium,synthetic:large");
  const std::vector<std::string> histories = env_items("SIESTA_BENCH_HISTORIES", "1024,8192,32768");
  const auto rounds = static_cast<int>(std::max<uint64_t>(1, env_number("SIESTA_BENCH_ROUNDS", 3)));
  for (const std::string& backend : backends) {
    for (const Case& c : cases) {
      benchmark::RegisterBenchmark(("prefill/" + backend + "/" + c.spec).c_str(), prefill, backend,
                                   std::string(c.spec), c.prefill_tokens)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
      benchmark::RegisterBenchmark(("decode/" + backend + "/" + c.spec).c_str(), decode, backend,
                                   std::string(c.spec), c.decode_tokens)
          ->Unit(benchmark::kMillisecond)
          ->UseRealTime();
    }
    for (const std::string& model : history_models) {
      for (const std::string& history : histories) {
        const uint32_t h = static_cast<uint32_t>(std::stoul(history));
        std::string name = "prefill_history/";
        name.append(backend).append("/").append(model).append("/history:").append(history);
        benchmark::RegisterBenchmark(name.c_str(), prefill_history, backend, model, h, rounds)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->Iterations(1);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
