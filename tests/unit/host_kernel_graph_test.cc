// HostKernels graphs: operations recorded, not run, while capturing; what capture refuses;
// replays bit for bit and equal to direct execution; a graph replayed after its memory was
// released and re-committed at the same address gives the same bits, and one replayed over
// memory that was only released faults (a real SIGSEGV on the simulator's PROT_NONE pages).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "backends/sim/host_kernels.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/host_kernels_fixture.h"
#include "tests/support/reference_kernels.h"

namespace siesta {
namespace {

using kernel_test::as_bytes_of;
using kernel_test::expect_same_bits;
using kernel_test::HostKernelsTest;
using kernel_test::print_seed;
using kernel_test::Random;
using kernel_test::small_sim_options;

// ---- Graphs ----

TEST_F(HostKernelsTest, OperationsRecordedWhileCapturingRunOnlyOnReplay) {
  const uint32_t n = 16;
  const std::vector<float> x(n, 1.5f), y(n, 10.0f);
  const DeviceAddress xa = put(x), ya = put(y);
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  SIESTA_ASSERT_OK(kernels_->add(xa, n, ya));
  SIESTA_ASSERT_OK(kernels_->add(xa, n, ya));
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelGraph> graph, kernels_->end_capture());
  EXPECT_EQ(graph->operation_count(), 2u);
  SIESTA_ASSERT_OK(sim_->synchronize());
  expect_same_bits(get(ya, n), y, "nothing ran while recording");
  SIESTA_ASSERT_OK(kernels_->replay(*graph));
  expect_same_bits(get(ya, n), std::vector<float>(n, 13.0f), "first replay");
  SIESTA_ASSERT_OK(kernels_->replay(*graph));
  graph.reset();  // a graph may go away while its replay is still queued
  expect_same_bits(get(ya, n), std::vector<float>(n, 16.0f), "second replay");
}

TEST_F(HostKernelsTest, TransfersAndNestedCaptureAreRefusedWhileCapturing) {
  std::vector<float> buffer(4, 0.0f);
  const DeviceAddress a = put(buffer);
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  const auto misuse = StatusCode::kFailedPrecondition;
  SIESTA_EXPECT_CODE(kernels_->upload(as_bytes_of(buffer), a), misuse);
  SIESTA_EXPECT_CODE(kernels_->download(a, std::as_writable_bytes(std::span(buffer))), misuse);
  SIESTA_EXPECT_CODE(kernels_->synchronize(), misuse);
  SIESTA_EXPECT_CODE(kernels_->fence(), misuse);
  SIESTA_EXPECT_CODE(kernels_->begin_capture(), misuse);
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelGraph> graph, kernels_->end_capture());
  EXPECT_EQ(graph->operation_count(), 0u);  // the refused transfers did not poison it
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  SIESTA_EXPECT_CODE(kernels_->replay(*graph), misuse);
  SIESTA_ASSERT_OK(kernels_->end_capture());
}

// Guards: a fence that waits for nothing (a save would copy bytes a queued kernel is still to
// write) or for everything (a save would wait for another session's decode queued after the
// mark). The simulator runs work only when something waits for it, so what the fence ran is
// exactly what it waited for. Waited for on another thread, as a background save does.
TEST_F(HostKernelsTest, AFenceWaitsForTheWorkBeforeItAndNotForWorkAfterIt) {
  const uint32_t n = 16;
  const std::vector<float> x(n, 1.5f), y(n, 10.0f), z(n, 20.0f);
  const DeviceAddress xa = put(x), ya = put(y), za = put(z);
  SIESTA_ASSERT_OK(kernels_->add(xa, n, ya));
  SIESTA_ASSERT_OK_AND_ASSIGN(std::unique_ptr<KernelFence> fence, kernels_->fence());
  SIESTA_ASSERT_OK(kernels_->add(xa, n, za));  // queued after the fence
  Status waited = Internal("not waited");
  std::thread saver([&] { waited = fence->wait(); });
  saver.join();
  SIESTA_ASSERT_OK(waited);
  // The simulator's device addresses are host pointers: read without waiting for anything.
  const auto* y_now = reinterpret_cast<const float*>(ya);  // NOLINT(performance-no-int-to-ptr)
  const auto* z_now = reinterpret_cast<const float*>(za);  // NOLINT(performance-no-int-to-ptr)
  expect_same_bits(std::vector<float>(y_now, y_now + n), std::vector<float>(n, 11.5f),
                   "the add before the fence");
  expect_same_bits(std::vector<float>(z_now, z_now + n), z, "the add after the fence");
  SIESTA_ASSERT_OK(fence->wait());  // again: at once
  expect_same_bits(get(za, n), std::vector<float>(n, 21.5f), "once synchronized");
}

TEST_F(HostKernelsTest, EndCaptureWithoutBeginIsFailedPrecondition) {
  SIESTA_EXPECT_CODE(kernels_->end_capture(), StatusCode::kFailedPrecondition);
}

TEST_F(HostKernelsTest, AnOperationRefusedWhileRecordingFailsEndCaptureAndEndsIt) {
  const DeviceAddress a = put(std::vector<float>(8, 0.0f));
  SIESTA_ASSERT_OK(kernels_->begin_capture());
  SIESTA_EXPECT_CODE(kernels_->matmul(a, a + 64, 0, 4, a + 128), StatusCode::kInvalidArgument);
  SIESTA_ASSERT_OK(kernels_->add(a, 8, a));
  SIESTA_EXPECT_CODE(kernels_->end_capture(), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_OK(kernels_->synchronize());    // no longer capturing
  SIESTA_ASSERT_OK(kernels_->begin_capture());  // and a new capture starts clean
  SIESTA_ASSERT_OK(kernels_->add(a, 8, a));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, kernels_->end_capture());
  EXPECT_EQ(graph->operation_count(), 1u);
}

TEST_F(HostKernelsTest, ReplayRefusesAGraphAnotherKernelsRecorded) {
  SIESTA_ASSERT_OK_AND_ASSIGN(auto other, HostKernels::create(*sim_));
  SIESTA_ASSERT_OK(other->begin_capture());
  SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, other->end_capture());
  SIESTA_EXPECT_CODE(kernels_->replay(*graph), StatusCode::kInvalidArgument);
  SIESTA_EXPECT_OK(other->replay(*graph));
}

// A decode-step-shaped graph over one arena: every kernel, reading token and position from
// StepParams at run time. Inputs are re-uploaded before each replay (the recurrent state and
// the KV caches change in place).
struct MiniStep {
  static constexpr uint32_t kVocab = 11, kHeads = 2, kHeadDim = 16, kDim = kHeads * kHeadDim,
                            kHidden = 48, kContext = 8;
  KvType type = KvType::kF32;
  std::vector<std::pair<DeviceAddress, std::vector<float>>> inputs;
  std::vector<std::byte> cache_bytes;
  DeviceAddress k_cache = 0, v_cache = 0, params = 0, rope = 0;
  DeviceAddress begin = 0, end = 0;  // the whole arena the step touches

  Status upload_inputs(Kernels& kernels, int32_t token, int32_t position) {
    for (auto& [at, values] : inputs) {
      SIESTA_RETURN_IF_ERROR(kernels.upload(std::as_bytes(std::span(values)), at));
    }
    SIESTA_RETURN_IF_ERROR(kernels.upload(cache_bytes, k_cache));
    SIESTA_RETURN_IF_ERROR(kernels.upload(cache_bytes, v_cache));
    const StepParams p{token, position};
    SIESTA_RETURN_IF_ERROR(kernels.upload(std::as_bytes(std::span(&p, 1)), params));
    // The constants region is re-initialised, not saved.
    return kernels.rope_table(rope, kContext, kHeadDim, 10000.0f);
  }
};

MiniStep make_mini_step(KvType type, DeviceAddress base, uint64_t salt) {
  MiniStep s;
  s.type = type;
  Random rng(salt);
  DeviceAddress next = base;
  auto alloc = [&](size_t bytes) {
    const DeviceAddress at = next;
    next += test_util::round_up(bytes, 256);
    return at;
  };
  auto input = [&](size_t n, float lo, float hi) {
    const DeviceAddress at = alloc(n * 4);
    s.inputs.emplace_back(at, rng.floats(n, lo, hi));
    return at;
  };
  using M = MiniStep;
  s.begin = base;
  s.params = alloc(sizeof(StepParams));
  s.rope = alloc(size_t{M::kContext} * M::kHeadDim * 4);
  const size_t cache = kv_row_bytes(type, M::kDim) * M::kContext;
  s.k_cache = alloc(cache);
  s.v_cache = alloc(cache);
  for (uint32_t r = 0; r < M::kContext; ++r) {
    const auto row = ref::kv_encode(type, rng.floats(M::kDim, -1, 1));
    s.cache_bytes.insert(s.cache_bytes.end(), row.begin(), row.end());
  }
  input(size_t{M::kVocab} * M::kDim, -1, 1);  // embedding table: inputs[0]
  input(M::kDim, 0.5f, 1.5f);                 // norm weight: inputs[1]
  for (int i = 0; i < 3; ++i) input(size_t{M::kDim} * M::kDim, -0.3f, 0.3f);  // wq wk wv
  input(size_t{M::kHidden} * M::kDim, -0.3f, 0.3f);                           // w_gate
  input(size_t{M::kHidden} * M::kDim, -0.3f, 0.3f);                           // w_up
  input(M::kHidden, -1, 1);                                                   // state
  input(size_t{M::kVocab} * M::kHidden, -0.5f, 0.5f);                         // w_out
  s.end = next;
  return s;
}

// Records the step into `kernels` (which must be capturing or not: it works either way).
Status record_mini_step(Kernels& k, const MiniStep& s, DeviceAddress scratch) {
  using M = MiniStep;
  DeviceAddress next = scratch;
  auto alloc = [&](size_t bytes) {
    const DeviceAddress at = next;
    next += test_util::round_up(bytes, 256);
    return at;
  };
  const DeviceAddress table = s.inputs[0].first, norm = s.inputs[1].first, wq = s.inputs[2].first,
                      wk = s.inputs[3].first, wv = s.inputs[4].first, w_gate = s.inputs[5].first,
                      w_up = s.inputs[6].first, state = s.inputs[7].first,
                      w_out = s.inputs[8].first;
  const DeviceAddress x = alloc(M::kDim * 4), xn = alloc(M::kDim * 4), q = alloc(M::kDim * 4),
                      kk = alloc(M::kDim * 4), vv = alloc(M::kDim * 4), att = alloc(M::kDim * 4),
                      gate = alloc(M::kHidden * 4), up = alloc(M::kHidden * 4),
                      logits = alloc(M::kVocab * 4), token = alloc(4);
  SIESTA_RETURN_IF_ERROR(k.embed(table, M::kDim, s.params, x));
  SIESTA_RETURN_IF_ERROR(k.rms_norm(x, norm, M::kDim, 1e-5f, xn));
  SIESTA_RETURN_IF_ERROR(k.matmul(wq, xn, M::kDim, M::kDim, q));
  SIESTA_RETURN_IF_ERROR(k.matmul(wk, xn, M::kDim, M::kDim, kk));
  SIESTA_RETURN_IF_ERROR(k.matmul(wv, xn, M::kDim, M::kDim, vv));
  SIESTA_RETURN_IF_ERROR(k.rope(q, M::kHeads, M::kHeadDim, s.rope, s.params));
  SIESTA_RETURN_IF_ERROR(k.rope(kk, M::kHeads, M::kHeadDim, s.rope, s.params));
  SIESTA_RETURN_IF_ERROR(k.kv_store(kk, vv, s.type, M::kDim, s.k_cache, s.v_cache, s.params));
  SIESTA_RETURN_IF_ERROR(k.attention(q, s.k_cache, s.v_cache, s.type, M::kHeads, M::kHeadDim,
                                     M::kContext, s.params, att));
  SIESTA_RETURN_IF_ERROR(k.add(att, M::kDim, x));
  SIESTA_RETURN_IF_ERROR(k.matmul(w_gate, x, M::kHidden, M::kDim, gate));
  SIESTA_RETURN_IF_ERROR(k.matmul(w_up, x, M::kHidden, M::kDim, up));
  SIESTA_RETURN_IF_ERROR(k.swiglu(gate, up, M::kHidden, gate));
  SIESTA_RETURN_IF_ERROR(k.recurrent_update(gate, up, M::kHidden, state));
  SIESTA_RETURN_IF_ERROR(k.matmul(w_out, state, M::kVocab, M::kHidden, logits));
  return k.argmax(logits, 0, M::kVocab - 1, token);
}

constexpr size_t kStepScratchOffset = 512u << 10;  // inside the 2 MiB arena, past the inputs

TEST_F(HostKernelsTest, ReplayingTwiceGivesIdenticalBitsAndMatchesDirectExecution) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    SCOPED_TRACE(std::string(kv_type_name(type)));
    const DeviceAddress base = arena_.range().base;
    MiniStep step = make_mini_step(type, base, 200 + static_cast<int>(type));
    ASSERT_LT(step.end, base + kStepScratchOffset);
    const size_t bytes = kArenaBytes;
    // Direct execution, for comparison.
    SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(bytes), base));
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 4, 5));
    SIESTA_ASSERT_OK(record_mini_step(*kernels_, step, base + kStepScratchOffset));
    const auto direct = get_bytes(base, bytes);

    SIESTA_ASSERT_OK(kernels_->begin_capture());
    SIESTA_ASSERT_OK(record_mini_step(*kernels_, step, base + kStepScratchOffset));
    SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, kernels_->end_capture());
    EXPECT_EQ(graph->operation_count(), 16u);
    std::vector<std::byte> replays[2];
    for (auto& out : replays) {
      SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(bytes), base));
      SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 4, 5));
      SIESTA_ASSERT_OK(kernels_->replay(*graph));
      out = get_bytes(base, bytes);
    }
    EXPECT_EQ(test_util::first_difference(replays[0], replays[1]), -1);
    EXPECT_EQ(test_util::first_difference(replays[0], direct), -1);
    // And the token read at run time matters: another token changes the result.
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 7, 5));
    SIESTA_ASSERT_OK(kernels_->replay(*graph));
    EXPECT_NE(test_util::first_difference(get_bytes(base, bytes), replays[0]), -1);
  }
}

TEST_F(HostKernelsTest, GraphReplayedAfterDecommitAndCommitAtTheSameAddressGivesTheSameBits) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    SCOPED_TRACE(std::string(kv_type_name(type)));
    const DeviceAddress base = arena_.range().base;
    MiniStep step = make_mini_step(type, base, 300 + static_cast<int>(type));
    SIESTA_ASSERT_OK(kernels_->begin_capture());
    SIESTA_ASSERT_OK(record_mini_step(*kernels_, step, base + kStepScratchOffset));
    SIESTA_ASSERT_OK_AND_ASSIGN(auto graph, kernels_->end_capture());

    SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(kArenaBytes), base));
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 2, 7));  // the last position of the context
    SIESTA_ASSERT_OK(kernels_->replay(*graph));
    const auto before = get_bytes(base, kArenaBytes);

    SIESTA_ASSERT_OK(sim_->decommit(arena_.range()));
    SIESTA_ASSERT_OK(sim_->commit(arena_.range()));  // fresh memory, same address
    SIESTA_ASSERT_OK(kernels_->upload(std::vector<std::byte>(kArenaBytes), base));
    SIESTA_ASSERT_OK(step.upload_inputs(*kernels_, 2, 7));
    SIESTA_ASSERT_OK(kernels_->replay(*graph));
    EXPECT_EQ(test_util::first_difference(get_bytes(base, kArenaBytes), before), -1);
  }
}

// Runs in the death test's child (so the simulator's stream thread is the child's own):
// records a graph over committed memory, releases the memory, replays. Any other way out
// exits with a message and a code the death test does not accept.
[[noreturn]] void fail_setup(const char* what) {
  std::fprintf(stderr, "setup failed: %s\n", what);
  std::_Exit(3);
}

void replay_after_decommit() {
  auto sim = SimBackend::create(small_sim_options());
  if (!sim.ok()) fail_setup("create backend");
  auto kernels = HostKernels::create(**sim);
  if (!kernels.ok()) fail_setup("create kernels");
  auto range = (*sim)->reserve(64u << 10);
  if (!range.ok() || !(*sim)->commit(*range).ok()) fail_setup("reserve/commit");
  if (!(*kernels)->begin_capture().ok()) fail_setup("begin_capture");
  if (!(*kernels)->add(range->base, 16, range->base + 1024).ok()) fail_setup("add");
  auto graph = (*kernels)->end_capture();
  if (!graph.ok()) fail_setup("end_capture");
  if (!(*kernels)->replay(**graph).ok() || !(*kernels)->synchronize().ok()) {
    fail_setup("replay over committed memory");
  }
  if (!(*sim)->decommit(*range).ok()) fail_setup("decommit");
  (void)(*kernels)->replay(**graph);
  (void)(*kernels)->synchronize();  // the replay faults on the PROT_NONE pages before this returns
  std::fprintf(stderr, "replay over released memory did not fault\n");
  std::_Exit(0);
}

TEST(HostKernelsDeathTest, ReplayingAGraphOverDecommittedMemoryFaults) {
  print_seed();
#ifdef SIESTA_SANITIZERS
  // AddressSanitizer reports the SEGV itself and exits non-zero.
  EXPECT_DEATH(replay_after_decommit(), "SEGV");
#else
  EXPECT_EXIT(replay_after_decommit(), ::testing::KilledBySignal(SIGSEGV), "");
#endif
}

}  // namespace
}  // namespace siesta
