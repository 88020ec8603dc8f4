// Save and restore of a real engine session through the Offloader, per backend: the session
// is filled by a real prefill of N tokens, then saved (snapshot written, fdatasync'ed,
// renamed, memory released) and restored (memory committed at the same addresses, snapshot
// read and verified, bytes copied in). Reported: snapshot bytes, save and restore times as the
// Offloader measures them (OffloadStatus::last_save_ms / last_restore_ms) and throughput.
//
//   offload_bench [--backend host|cuda] [--model synthetic:medium] [--tokens N]
//                 [--dir DIR] [--cycles C] [--encrypt on|off]
//
// Prints one JSON object per cycle and a summary line. The snapshot directory defaults to
// $SIESTA_BENCH_DIR or /tmp (choose a real disk: tmpfs makes fdatasync free).
#include <chrono>
#include <cstdio>
#include <string>

#include "bench/bench_engine_rig.h"
#include "bench/bench_store.h"
#include "engine/engine.h"

namespace siesta::bench {
namespace {

struct Args {
  std::string backend = "host";
  std::string model = "synthetic:medium";
  uint32_t tokens = 2048;
  std::string dir;
  int cycles = 3;
  bool encrypt = true;
};

int fail(const Status& status) {
  std::fprintf(stderr, "offload_bench: %s\n", status.to_string().c_str());
  return 1;
}

int run(const Args& args) {
  Result<engine::ModelConfig> config = engine::model_config_from_spec(args.model);
  if (!config.ok()) return fail(config.status());
  // The prefill takes `tokens` and each cycle's one-token request adds one more: all of it
  // must fit in the context, or the engine refuses the first request.
  const uint64_t needed = uint64_t{args.tokens} + static_cast<uint64_t>(args.cycles) + 1;
  if (needed > config->context) {
    return fail(InvalidArgument("--tokens " + std::to_string(args.tokens) + " and --cycles " +
                                std::to_string(args.cycles) + " need " + std::to_string(needed) +
                                " tokens of context; " + args.model + " has " +
                                std::to_string(config->context)));
  }
  EngineRig rig;
  if (Status made =
          make_engine_rig(args.backend, *config, /*offload_on=*/true, args.encrypt, args.dir, rig);
      !made.ok()) {
    return fail(made);
  }
  engine::Engine& engine = rig.engine();

  std::string prompt;
  pad_prompt(prompt, args.tokens);
  engine::GenerateRequest fill;
  fill.prompt = prompt;
  fill.max_tokens = 1;
  const auto fill_start = std::chrono::steady_clock::now();
  Result<engine::GenerateResult> filled = engine.generate(fill).get();
  if (!filled.ok()) return fail(filled.status());
  const double fill_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - fill_start).count();
  std::fprintf(stderr, "offload_bench: %s on %s: %u tokens prefilled in %.1f s\n",
               args.model.c_str(), args.backend.c_str(), args.tokens, fill_s);

  double save_total = 0, restore_total = 0;
  uint64_t bytes = 0;
  for (int cycle = 0; cycle < args.cycles; ++cycle) {
    Result<OffloadStatus> saved = save_now(rig);
    if (!saved.ok()) return fail(saved.status());
    const OffloadStatus& slept = *saved;
    const double save_ms = slept.last_save_ms;  // synchronize, write, sync, rename, release
    bytes = slept.disk_bytes;
    // A one-token request that extends the history: the restore, then one decode step.
    engine::GenerateRequest next;
    next.prompt = prompt + filled->text;
    next.max_tokens = 1;
    const auto restore_start = std::chrono::steady_clock::now();
    Result<engine::GenerateResult> woke = engine.generate(next).get();
    const double request_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - restore_start)
            .count();
    if (!woke.ok()) return fail(woke.status());
    if (!woke->admission.restored) return fail(Internal("not restored"));
    const double restore_ms = engine.cache_status().last_restore_ms;  // commit, read, copy
    prompt = next.prompt;
    filled = std::move(woke);
    save_total += save_ms;
    restore_total += restore_ms;
    std::printf(
        "{\"backend\":\"%s\",\"model\":\"%s\",\"tokens\":%u,\"encrypt\":%s,\"cycle\":%d,"
        "\"snapshot_bytes\":%llu,\"released_vram_bytes\":%llu,\"save_ms\":%.2f,"
        "\"restore_ms\":%.2f,\"first_request_ms\":%.2f,\"save_gb_s\":%.3f,\"restore_gb_s\":%.3f}\n",
        args.backend.c_str(), args.model.c_str(), args.tokens, args.encrypt ? "true" : "false",
        cycle, static_cast<unsigned long long>(bytes),
        static_cast<unsigned long long>(slept.released_vram_bytes), save_ms, restore_ms, request_ms,
        bytes / save_ms / 1e6, bytes / restore_ms / 1e6);
  }
  std::fprintf(stderr,
               "offload_bench: %llu bytes: save %.1f ms (%.2f GB/s), restore %.1f ms (%.2f GB/s), "
               "mean of %d\n",
               static_cast<unsigned long long>(bytes), save_total / args.cycles,
               bytes / (save_total / args.cycles) / 1e6, restore_total / args.cycles,
               bytes / (restore_total / args.cycles) / 1e6, args.cycles);
  return 0;
}

}  // namespace
}  // namespace siesta::bench

int main(int argc, char** argv) {
  siesta::bench::Args args;
  args.dir = siesta::bench::bench_base_dir();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--backend") {
      args.backend = value;
    } else if (flag == "--model") {
      args.model = value;
    } else if (flag == "--tokens") {
      args.tokens = static_cast<uint32_t>(std::stoul(value));
    } else if (flag == "--dir") {
      args.dir = value;
    } else if (flag == "--cycles") {
      args.cycles = std::stoi(value);
    } else if (flag == "--encrypt") {
      args.encrypt = value != "off";
    } else {
      std::fprintf(stderr, "offload_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  args.dir = siesta::bench::bench_store_dir(args.dir, "siesta-offload-bench");
  return siesta::bench::run(args);
}
