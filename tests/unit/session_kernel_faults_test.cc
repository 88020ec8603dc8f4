// A Session whose kernels fail (tests/support/call_failing_kernels.h), on the simulator with
// synthetic:tiny. Session::create failing at each of its kernels calls returns that call's
// error (with the decode step's context while the step is being recorded) and keeps no device
// or host memory; each kernels call of a turn (a rollback to a checkpoint, to the prompt's end
// and to the start, prefill blocks, the prompt-end checkpoint, the logits, greedy steps)
// returns its error, and discard_history() then leaves a session that answers as a fresh one;
// a session whose host memory is released refuses every call that would read it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "core/memory/host_vmm.h"
#include "engine/model.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/call_failing_kernels.h"
#include "tests/support/engine_test_util.h"

namespace siesta::engine {
namespace {

using ::siesta::testing::CallFailingKernels;
using test_util::Answer;
using ::testing::HasSubstr;

// The simulator, its kernels behind a CallFailingKernels, a model loaded through them
// (disarmed) and, once made, a session.
struct FaultRig {
  std::unique_ptr<SimBackend> backend;
  std::unique_ptr<HostKernels> host_kernels;
  std::unique_ptr<CallFailingKernels> kernels;
  HostVmm host;
  std::unique_ptr<Model> model;
  std::unique_ptr<Session> session;

  Status init(const ModelConfig& config) {
    SimBackendOptions options;
    options.granularity = 64u << 10;
    SIESTA_ASSIGN_OR_RETURN(backend, SimBackend::create(options));
    SIESTA_ASSIGN_OR_RETURN(host_kernels, HostKernels::create(*backend));
    kernels = std::make_unique<CallFailingKernels>(*host_kernels);
    SIESTA_ASSIGN_OR_RETURN(model, Model::load(config, *backend, *kernels));
    return Status::Ok();
  }
  Result<std::unique_ptr<Session>> create() {
    return Session::create(*model, *backend, *kernels, host);
  }
};

// A turn as the engine runs one: the prompt after what the session can reuse, in prefill
// blocks of up to 8 tokens, the checkpoint where the prompt ends, its logits, then `tokens`
// greedy steps (each fed but the last).
Status turn(Session& session, std::string_view prompt, int tokens) {
  const std::vector<Token> ids = encode(prompt);
  SIESTA_ASSIGN_OR_RETURN(uint32_t at, session.reuse_prefix(ids));
  while (at < ids.size()) {
    const size_t length = std::min<size_t>(8, ids.size() - at);
    SIESTA_ASSIGN_OR_RETURN(uint32_t fed, session.feed_block(std::span(ids).subspan(at, length)));
    at += fed;
  }
  SIESTA_RETURN_IF_ERROR(session.checkpoint_prompt_end());
  SIESTA_RETURN_IF_ERROR(session.next_logits().status());
  for (int i = 0; i < tokens; ++i) {
    SIESTA_ASSIGN_OR_RETURN(Token next, session.greedy_next());
    if (i + 1 < tokens) SIESTA_RETURN_IF_ERROR(session.feed(next));
  }
  return Status::Ok();
}

const ModelConfig& config() {
  static const ModelConfig kConfig = test_util::tiny(KvType::kF16);
  return kConfig;
}

TEST(SessionKernelFaults, CreateReturnsEachKernelCallsErrorAndKeepsNoMemory) {
  FaultRig rig;
  SIESTA_ASSERT_OK(rig.init(config()));
  const MemoryStats weights = rig.backend->stats();
  rig.kernels->disarm();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> first, rig.create());
  // Zeroing the state, the RoPE table, the decode step's recording (an operation per kernel
  // of each layer) and the final synchronize; counted before the session's destructor adds
  // its own synchronize.
  const uint64_t calls = rig.kernels->calls();
  ASSERT_GT(calls, 40u);
  first.reset();

  int recording = 0;
  for (uint64_t n = 1; n <= calls; ++n) {
    SCOPED_TRACE("kernels call " + std::to_string(n) + " of " + std::to_string(calls));
    rig.kernels->arm(n);
    Result<std::unique_ptr<Session>> made = rig.create();
    ASSERT_NE(rig.kernels->fired(), nullptr);
    SCOPED_TRACE(rig.kernels->fired());
    ASSERT_FALSE(made.ok());
    EXPECT_EQ(made.status().code(), StatusCode::kDeviceError);
    EXPECT_THAT(made.status().message(),
                HasSubstr(std::string("injected failure of kernels ") + rig.kernels->fired()));
    if (rig.kernels->fired_while_capturing()) {
      ++recording;
      EXPECT_THAT(made.status().message(), HasSubstr("recording the decode step"));
    }
    // Nothing of the session is left: its device range and its host range are gone.
    EXPECT_EQ(rig.backend->stats().committed_bytes, weights.committed_bytes);
    EXPECT_EQ(rig.backend->stats().reserved_bytes, weights.reserved_bytes);
    EXPECT_EQ(rig.host.stats().reserved_bytes, 0u);
  }
  EXPECT_GT(recording, 30) << "most calls are the decode step's, made while it is recorded";

  // A failed recording never leaves the kernels capturing: a session can still be made, and
  // it answers as one made on kernels that never failed.
  rig.kernels->disarm();
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Session> session, rig.create());
  SIESTA_ASSERT_OK(test_util::prefill(*session, test_util::kPrompt));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, test_util::answer(*session, 8));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh,
                              test_util::fresh_answer(config(), test_util::kPrompt, 8));
  EXPECT_EQ(after, fresh);
}

TEST(SessionKernelFaults, EachKernelCallOfATurnReturnsItsErrorAndADiscardStartsOver) {
  FaultRig rig;
  SIESTA_ASSERT_OK(rig.init(config()));
  SIESTA_ASSERT_OK_AND_ASSIGN(rig.session, rig.create());
  Session& session = *rig.session;
  ASSERT_EQ(config().checkpoint_interval, 16u);

  // From the history of test_util::kPrompt (69 tokens): a prompt diverging at 40 (back to the
  // checkpoint at 32), the same prompt again (back to its end, logits included), and a prompt
  // diverging at its first token (back to the start: the state zeroed).
  const std::string edited = std::string(test_util::kPrompt.substr(0, 40)) + " again";
  auto scenario = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(turn(session, edited, 3));
    SIESTA_RETURN_IF_ERROR(turn(session, edited, 2));
    return turn(session, "A different story.", 2);
  };
  auto start = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(session.discard_history());
    return turn(session, test_util::kPrompt, 2);
  };
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, test_util::fresh_answer(config(), edited, 6));

  rig.kernels->disarm();
  SIESTA_ASSERT_OK(start());
  rig.kernels->disarm();
  SIESTA_ASSERT_OK(scenario());
  const uint64_t calls = rig.kernels->calls();
  ASSERT_GT(calls, 100u);

  std::vector<std::string> failed_calls;
  for (uint64_t n = 1; n <= calls; ++n) {
    SCOPED_TRACE("kernels call " + std::to_string(n) + " of " + std::to_string(calls));
    rig.kernels->disarm();
    SIESTA_ASSERT_OK(start());
    rig.kernels->arm(n);
    const Status failed = scenario();
    ASSERT_NE(rig.kernels->fired(), nullptr);
    SCOPED_TRACE(rig.kernels->fired());
    failed_calls.emplace_back(rig.kernels->fired());
    EXPECT_EQ(failed.code(), StatusCode::kDeviceError) << failed.to_string();
    EXPECT_THAT(failed.message(), HasSubstr("injected failure of kernels"));

    // The session's state is unknown after a device error; discarding the history makes it
    // answer exactly as a fresh session does.
    rig.kernels->disarm();
    SIESTA_ASSERT_OK(session.discard_history());
    EXPECT_EQ(session.length(), 0u);
    SIESTA_ASSERT_OK(test_util::prefill(session, edited));
    SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, test_util::answer(session, 6));
    ASSERT_EQ(after, fresh) << "'" << after.text << "' vs '" << fresh.text << "'";
  }
  // Every kind of call a turn makes was failed at least once.
  for (const char* call :
       {"upload", "download", "embed_block", "matmul_block", "attention_block", "recurrent_scan",
        "kv_store_block", "rms_norm", "matmul", "argmax", "replay"}) {
    EXPECT_NE(std::find(failed_calls.begin(), failed_calls.end(), call), failed_calls.end())
        << call;
  }
}

// A released session keeps only its length in ordinary memory; a call that would read or
// write its host memory is refused instead of faulting on it, and changes nothing.
TEST(SessionKernelFaults, ReleasedHostMemoryIsRefusedByEveryCallThatWouldTouchIt) {
  FaultRig rig;
  SIESTA_ASSERT_OK(rig.init(config()));
  SIESTA_ASSERT_OK_AND_ASSIGN(rig.session, rig.create());
  Session& session = *rig.session;
  SIESTA_ASSERT_OK(test_util::prefill(session, "hello there"));  // the next logits are ready
  SIESTA_ASSERT_OK(rig.kernels->synchronize());
  for (HostRange* range : session.host_memory()) SIESTA_ASSERT_OK(range->release());

  const std::vector<Token> more = encode("more");
  const std::pair<const char*, Status> refused[] = {
      {"feed", session.feed('x')},
      {"feed_block", session.feed_block(more).status()},
      {"greedy_next", session.greedy_next().status()},
      {"next_logits", session.next_logits().status()},
      {"checkpoint_prompt_end", session.checkpoint_prompt_end()},
      {"discard_history", session.discard_history()},
      {"adopt_restored_state", session.adopt_restored_state()},
  };
  for (const auto& [call, status] : refused) {
    SCOPED_TRACE(call);
    SIESTA_EXPECT_CODE(status, StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr(call));
    EXPECT_THAT(status.message(), HasSubstr("memory is released"));
  }
  EXPECT_EQ(session.length(), 11u);
}

}  // namespace
}  // namespace siesta::engine
