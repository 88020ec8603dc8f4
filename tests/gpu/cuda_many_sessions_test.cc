// Many conversations on the GPU: 16 conversations take 100 turns in a seeded random order over
// P = 2 sessions on CudaVmmBackend + CudaKernels, with idle offload to disk. Each returning
// conversation is restored at its own session's addresses and replays the decode graph that
// session captured (the session refuses to replay a graph whose memory moved, so a turn that
// succeeds is a turn at the same addresses), gets its whole kept history back, and answers
// what the same conversation gets from a CUDA engine that never offloads; committed device
// memory never exceeds the weights plus two sessions. The reference runs on CUDA too: CUDA and
// the host kernels agree within tolerances, not bit for bit, so a greedy argmax may differ
// between them. Skips, printing why, where CUDA is unavailable.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "core/base/clock.h"
#include "core/base/executor.h"
#include "engine/engine.h"
#include "engine/model_config.h"
#include "runtime/engine_stack.h"
#include "tests/support/temp_dir.h"

namespace siesta::engine {
namespace {

constexpr uint32_t kParallel = 2;
constexpr uint32_t kConversations = 16;
constexpr int kTurns = 100;

struct GpuStack {
  ManualClock clock;
  ManualExecutor executor{clock};
  siesta::testing::TempDir dir;
  std::unique_ptr<runtime::EngineStack> stack;

  Status start(uint32_t parallel, uint32_t sessions, bool offload) {
    runtime::EngineStackOptions options;
    options.device.kind = runtime::BackendKind::kCuda;
    SIESTA_ASSIGN_OR_RETURN(options.model, model_config_from_spec("synthetic:tiny"));
    if (offload) {
      options.offload.config.idle_seconds = 60;
      options.offload.config.expire_seconds = 600;
      options.offload.config.disk_dir = dir.path();
    }
    options.sessions.parallel = parallel;
    options.sessions.max_sessions = sessions;
    options.executor = &executor;
    options.log = [](const std::string&) {};
    SIESTA_ASSIGN_OR_RETURN(stack, runtime::EngineStack::open(std::move(options), clock));
    return Status::Ok();
  }
  Result<GenerateResult> generate(const std::string& prompt, SessionRoute route) {
    GenerateRequest request;
    request.prompt = prompt;
    request.max_tokens = 6;
    request.route = route;
    return stack->engine().generate(std::move(request)).get();
  }
  uint64_t committed() const { return stack->backend().stats().committed_bytes; }
};

TEST(CudaManySessionsTest, SixteenConversationsOverTwoSessionsKeepTheirHistories) {
  const std::string reason = CudaVmmBackend::unavailable_reason();
  if (!reason.empty()) GTEST_SKIP() << "CUDA unavailable: " << reason;
  GpuStack many, reference;
  ASSERT_TRUE(many.start(kParallel, kConversations, /*offload=*/true).ok());
  ASSERT_TRUE(reference.start(kConversations, kConversations, /*offload=*/false).ok());
  const uint64_t one_session = many.committed();  // the weights and session 0

  const uint32_t seed = std::random_device{}();
  std::printf("cuda many-sessions seed: %u\n", seed);
  std::mt19937 random(seed);
  std::vector<std::string> history(kConversations);
  uint64_t second_session = 0;  // one more session's bytes, measured when it first appears
  int returns = 0;
  for (int turn = 0; turn < kTurns; ++turn) {
    const uint32_t c = random() % kConversations;
    SCOPED_TRACE("seed " + std::to_string(seed) + " turn " + std::to_string(turn) +
                 " conversation " + std::to_string(c));
    if (history[c].size() > 900) history[c].clear();  // stay within the context
    const std::string prompt = history[c] + " [" + std::to_string(turn) + "] ";
    Result<GenerateResult> got = many.generate(prompt, route_by_key("user-" + std::to_string(c)));
    Result<GenerateResult> want = reference.generate(prompt, route_by_slot(c));
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    EXPECT_EQ(got->text, want->text);
    if (!history[c].empty()) {
      ++returns;
      EXPECT_EQ(got->cached_tokens, history[c].size() - 1) << "the history did not come back";
    }
    if (second_session == 0 && many.committed() > one_session) {
      second_session = many.committed() - one_session;
    }
    if (second_session != 0) {
      EXPECT_LE(many.committed(), one_session + (kParallel - 1) * second_session);
    }
    history[c] = prompt + got->text;
  }
  EXPECT_GT(returns, kTurns / 2);
  const EngineStatus status = many.stack->engine().status();
  std::printf(
      "cuda many-sessions: %d returning turns, %llu evictions, restores %llu\n", returns,
      static_cast<unsigned long long>(status.evictions),
      static_cast<unsigned long long>(many.stack->engine().cache_status().counters.restore_hits));
  EXPECT_GT(status.evictions, 0u);
}

}  // namespace
}  // namespace siesta::engine
