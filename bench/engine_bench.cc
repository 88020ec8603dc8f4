// Prefill and decode speed of the reference engine on each backend: the baseline that later
// work (the offloader, the server) must not slow down. Tokens per second are Google Benchmark
// rate counters; run with --benchmark_format=json for docs/PERFORMANCE.md.
//
//   prefill  a prompt of N tokens fed into an empty session (reuse_prefix + feed)
//   decode   greedy generation: greedy_next + feed, one token at a time, on a session
//            already holding a prompt
//
// Backends: "host" (HostKernels on the SimBackend) always; "cuda" (CudaKernels on the
// CudaVmmBackend) where the build has CUDA and a device is present.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_engine_rig.h"
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

Status make_rig(const std::string& backend_name, const std::string& spec, Rig& rig) {
  SIESTA_ASSIGN_OR_RETURN(engine::ModelConfig config, engine::model_config_from_spec(spec));
  SIESTA_RETURN_IF_ERROR(open_device(backend_name, rig.backend, rig.kernels));
  SIESTA_ASSIGN_OR_RETURN(rig.model, engine::Model::load(config, *rig.backend, *rig.kernels));
  SIESTA_ASSIGN_OR_RETURN(
      rig.session, engine::Session::create(*rig.model, *rig.backend, *rig.kernels, rig.host));
  return Status::Ok();
}

std::vector<Token> prompt_of(uint32_t tokens) {
  std::vector<Token> prompt(tokens);
  for (uint32_t i = 0; i < tokens; ++i) prompt[i] = static_cast<Token>('a' + (i * 7) % 26);
  return prompt;
}

void fail(benchmark::State& state, const Status& status) {
  state.SkipWithError(status.to_string().c_str());
}

void prefill(benchmark::State& state, std::string backend, std::string spec, uint32_t tokens) {
  Rig rig;
  if (Status made = make_rig(backend, spec, rig); !made.ok()) return fail(state, made);
  const std::vector<Token> prompt = prompt_of(tokens);
  for (auto _ : state) {
    if (Status s = rig.session->discard_history(); !s.ok()) return fail(state, s);
    Result<uint32_t> reused = rig.session->reuse_prefix(prompt);
    if (!reused.ok()) return fail(state, reused.status());
    for (uint32_t i = *reused; i < prompt.size(); ++i) {
      if (Status s = rig.session->feed(prompt[i]); !s.ok()) return fail(state, s);
    }
    Result<Token> next = rig.session->greedy_next();  // waits for the device
    if (!next.ok()) return fail(state, next.status());
    benchmark::DoNotOptimize(*next);
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(tokens) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void decode(benchmark::State& state, std::string backend, std::string spec, uint32_t tokens) {
  Rig rig;
  if (Status made = make_rig(backend, spec, rig); !made.ok()) return fail(state, made);
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
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
