// CudaKernels graphs and determinism on a real device: a small decode step (embed, rms_norm,
// matmul, rope, kv_store, attention, matmul, argmax, the next token fed back) recorded once
// gives the same bits replayed as launched eagerly, on every run, and after its memory was
// decommitted and committed again at the same address (contents re-uploaded) — the property
// the idle offload relies on. Capture misuse is refused with FailedPrecondition, bad
// arguments with InvalidArgument. Every test skips, printing why, where CUDA is unavailable.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <span>
#include <thread>
#include <vector>

#include "backends/cuda_vmm/cuda_kernels.h"
#include "core/memory/device_copy.h"
#include "tests/gpu/cuda_kernels_fixture.h"

namespace siesta {

// Test names and failure messages say "int8", not "1-byte object <02>" (found by ADL).
void PrintTo(KvType type, std::ostream* out) { *out << kv_type_name(type); }

namespace {

using test_util::CudaKernelsTest;
using test_util::random_floats;
using test_util::SameBits;

constexpr uint32_t kVocab = 512, kHeads = 4, kHeadDim = 32, kDim = kHeads * kHeadDim;
constexpr uint32_t kContext = 64, kSteps = 24;

struct StepBuffers {
  DeviceAddress table, norm, wq, rope, k_cache, v_cache, x, q, attn, w_out, logits, token, params;
};

class CudaKernelGraphTest : public CudaKernelsTest, public ::testing::WithParamInterface<KvType> {
 protected:
  KvType type() const { return GetParam(); }

  StepBuffers make_step() {
    StepBuffers b{};
    b.table = put(random_floats(size_t{kVocab} * kDim, 1));
    b.norm = put(random_floats(kDim, 2, 0.5f, 1.5f));
    b.wq = put(random_floats(size_t{kDim} * kDim, 3, -0.2f, 0.2f));
    b.rope = alloc(size_t{kContext} * kHeadDim * 4);
    b.k_cache = alloc(kv_row_bytes(type(), kDim) * kContext);
    b.v_cache = alloc(kv_row_bytes(type(), kDim) * kContext);
    b.x = alloc(kDim * 4);
    b.q = alloc(kDim * 4);
    b.attn = alloc(kDim * 4);
    b.w_out = put(random_floats(size_t{kVocab} * kDim, 4));
    b.logits = alloc(kVocab * 4);
    b.token = alloc(4);
    b.params = alloc(sizeof(StepParams));
    EXPECT_TRUE(kernels_->rope_table(b.rope, kContext, kHeadDim, 10000.0f).ok());
    return b;
  }

  // The caches back to zero: a fresh session.
  void clear_caches(const StepBuffers& b) {
    const std::vector<std::byte> zeros(kv_row_bytes(type(), kDim) * kContext);
    ASSERT_TRUE(kernels_->upload(zeros, b.k_cache).ok());
    ASSERT_TRUE(kernels_->upload(zeros, b.v_cache).ok());
  }

  Status record(const StepBuffers& b) {
    Kernels& k = *kernels_;
    SIESTA_RETURN_IF_ERROR(k.embed(b.table, kDim, b.params, b.x));
    SIESTA_RETURN_IF_ERROR(k.rms_norm(b.x, b.norm, kDim, 1e-5f, b.x));
    SIESTA_RETURN_IF_ERROR(k.matmul(b.wq, b.x, kDim, kDim, b.q));
    SIESTA_RETURN_IF_ERROR(k.rope(b.q, kHeads, kHeadDim, b.rope, b.params));
    SIESTA_RETURN_IF_ERROR(k.kv_store(b.q, b.x, type(), kDim, b.k_cache, b.v_cache, b.params));
    SIESTA_RETURN_IF_ERROR(k.attention(b.q, b.k_cache, b.v_cache, type(), kHeads, kHeadDim,
                                       kContext, b.params, b.attn));
    SIESTA_RETURN_IF_ERROR(k.matmul(b.w_out, b.attn, kVocab, kDim, b.logits));
    return k.argmax(b.logits, 0, kVocab - 1, b.token);
  }

  // Runs steps [from, to) feeding each step's token to the next (graph, or eager when null);
  // appends every step's logits (bytes) and token to `log`.
  void run(const StepBuffers& b, const KernelGraph* graph, int32_t& token, uint32_t from,
           uint32_t to, std::vector<std::byte>& log) {
    for (uint32_t position = from; position < to; ++position) {
      const StepParams params{token, static_cast<int32_t>(position)};
      ASSERT_TRUE(kernels_->upload(std::as_bytes(std::span(&params, 1)), b.params).ok());
      ASSERT_TRUE(graph != nullptr ? kernels_->replay(*graph).ok() : record(b).ok());
      const auto logits = get<std::byte>(b.logits, kVocab * 4);
      log.insert(log.end(), logits.begin(), logits.end());
      token = get<int32_t>(b.token, 1)[0];
      ASSERT_GE(token, 0);
      ASSERT_LT(token, static_cast<int32_t>(kVocab));
      const auto* token_bytes = reinterpret_cast<const std::byte*>(&token);
      log.insert(log.end(), token_bytes, token_bytes + 4);
    }
  }

  std::unique_ptr<KernelGraph> capture(const StepBuffers& b) {
    EXPECT_TRUE(kernels_->begin_capture().ok());
    EXPECT_TRUE(record(b).ok());
    auto graph = kernels_->end_capture();
    EXPECT_TRUE(graph.ok()) << graph.status().to_string();
    if (!graph.ok()) return nullptr;
    EXPECT_EQ((*graph)->operation_count(), 8u);
    return std::move(graph).value();
  }
};

TEST_P(CudaKernelGraphTest, ReplayEqualsEagerOnEveryRun) {
  const StepBuffers b = make_step();
  std::vector<std::byte> eager, replayed, again;
  int32_t token = 1;
  clear_caches(b);
  run(b, nullptr, token, 0, kSteps, eager);

  auto graph = capture(b);
  ASSERT_NE(graph, nullptr);
  for (std::vector<std::byte>* log : {&replayed, &again}) {
    token = 1;
    clear_caches(b);
    run(b, graph.get(), token, 0, kSteps, *log);
  }
  EXPECT_TRUE(SameBits(eager, replayed)) << "graph vs eager";
  EXPECT_TRUE(SameBits(replayed, again)) << "two replays";
}

TEST_P(CudaKernelGraphTest, ReplayIsBitIdenticalAfterDecommitAndCommit) {
  const StepBuffers b = make_step();
  auto graph = capture(b);
  ASSERT_NE(graph, nullptr);

  std::vector<std::byte> straight, offloaded;
  int32_t token = 1;
  clear_caches(b);
  run(b, graph.get(), token, 0, kSteps, straight);

  token = 1;
  clear_caches(b);
  run(b, graph.get(), token, 0, kSteps / 2, offloaded);
  // What the offload does: save every byte, release the memory, map fresh memory at the
  // same addresses, read the bytes back; the graph's recorded addresses are valid again.
  const DeviceRange arena = arena_.range();
  const auto saved = get<std::byte>(arena.base, used_);
  ASSERT_TRUE(backend_->synchronize().ok());
  ASSERT_TRUE(backend_->decommit(arena).ok());
  ASSERT_TRUE(backend_->commit(arena).ok());
  ASSERT_TRUE(kernels_->upload(saved, arena.base).ok());
  run(b, graph.get(), token, kSteps / 2, kSteps, offloaded);

  EXPECT_TRUE(SameBits(straight, offloaded));
}

INSTANTIATE_TEST_SUITE_P(KvTypes, CudaKernelGraphTest,
                         ::testing::Values(KvType::kF32, KvType::kF16, KvType::kInt8),
                         [](const auto& param_info) {
                           return std::string(kv_type_name(param_info.param));
                         });

TEST_F(CudaKernelsTest, LargeReductionsAreBitIdenticalAcrossRuns) {
  const uint32_t rows = 4096, cols = 4096;
  const DeviceAddress w = put(random_floats(size_t{rows} * cols, 1)),
                      x = put(random_floats(cols, 2)), out = alloc(rows * 4),
                      norm = alloc(cols * 4), weight = put(random_floats(cols, 3));
  std::vector<std::byte> first;
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(kernels_->matmul(w, x, rows, cols, out).ok());
    ASSERT_TRUE(kernels_->rms_norm(out, weight, cols, 1e-6f, norm).ok());
    auto bytes = get<std::byte>(out, rows * 4);
    const auto normed = get<std::byte>(norm, cols * 4);
    bytes.insert(bytes.end(), normed.begin(), normed.end());
    if (run == 0) {
      first = bytes;
    } else {
      EXPECT_TRUE(SameBits(first, bytes)) << "run " << run;
    }
  }
}

// Guards: a fence whose wait returns before the work queued ahead of it has run (a background
// save would copy a session's memory under its last kernels). The wait runs on another thread,
// as a save does, and the result is read through the backend's copy stream, which nothing
// orders with the kernels' stream but the fence.
TEST_F(CudaKernelsTest, AFenceWaitsForTheWorkBeforeIt) {
  const uint32_t rows = 4096, cols = 4096;
  const DeviceAddress w = put(random_floats(size_t{rows} * cols, 1)),
                      x = put(random_floats(cols, 2)), out = alloc(rows * 4);
  ASSERT_TRUE(kernels_->synchronize().ok());
  std::vector<std::byte> expected;
  for (int run = 0; run < 2; ++run) {
    ASSERT_TRUE(backend_->zero({out, rows * 4}).ok());
    ASSERT_TRUE(backend_->synchronize().ok());
    ASSERT_TRUE(kernels_->matmul(w, x, rows, cols, out).ok());
    auto fence = kernels_->fence();
    ASSERT_TRUE(fence.ok()) << fence.status().to_string();
    Status waited = Internal("not waited");
    std::thread saver([&] { waited = (*fence)->wait(); });
    saver.join();
    ASSERT_TRUE(waited.ok()) << waited.to_string();
    std::vector<std::byte> seen(rows * 4);
    ASSERT_TRUE(copy_device_to_host(*backend_, out, seen).ok());
    if (run == 0) {
      expected = get<std::byte>(out, rows * 4);
    }
    EXPECT_TRUE(SameBits(expected, seen)) << "run " << run << ": the fence returned early";
  }
}

TEST_F(CudaKernelsTest, CaptureMisuseIsRefused) {
  const DeviceAddress a = alloc(1024), b = alloc(1024);
  const std::vector<std::byte> bytes(16);
  std::vector<std::byte> out(16);
  EXPECT_EQ(kernels_->end_capture().status().code(), StatusCode::kFailedPrecondition);

  ASSERT_TRUE(kernels_->begin_capture().ok());
  EXPECT_EQ(kernels_->begin_capture().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(kernels_->upload(bytes, a).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(kernels_->download(a, out).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(kernels_->synchronize().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(kernels_->fence().status().code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(kernels_->add(a, 16, b).ok());
  auto graph = kernels_->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  EXPECT_EQ((*graph)->operation_count(), 1u);

  // A failed operation while recording: end_capture reports it, and the stream works after.
  ASSERT_TRUE(kernels_->begin_capture().ok());
  EXPECT_TRUE(kernels_->add(a, 16, b).ok());
  EXPECT_EQ(kernels_->matmul(a, b, 0, 4, b + 512).code(), StatusCode::kInvalidArgument);
  auto failed = kernels_->end_capture();
  EXPECT_EQ(failed.status().code(), StatusCode::kInvalidArgument) << failed.status().to_string();
  EXPECT_TRUE(kernels_->replay(**graph).ok());
  EXPECT_TRUE(kernels_->synchronize().ok());

  // A graph of another CudaKernels is refused.
  auto other = CudaKernels::create();
  ASSERT_TRUE(other.ok()) << other.status().to_string();
  EXPECT_EQ((*other)->replay(**graph).code(), StatusCode::kInvalidArgument);
}

TEST_F(CudaKernelsTest, BadArgumentsAreRefusedBeforeTheDevice) {
  const DeviceAddress a = alloc(4096), b = alloc(4096), p = alloc(8);
  EXPECT_EQ(kernels_->add(a, 0, b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_->add(0, 4, b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_->add(a + 2, 4, b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_->matmul(a, a + 8, 4, 4, a).code(), StatusCode::kInvalidArgument)
      << "out overlaps x";
  EXPECT_EQ(kernels_->argmax(a, 5, 4, b).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_->rope_table(a, 4, 3, 10000.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_->rope_table(a, 4, 4, -1.0f).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_->rms_norm(a, b, 4, -1.0f, a).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernels_->kv_store(a, b, KvType::kInt8, 48, a, b, p).code(),
            StatusCode::kInvalidArgument)
      << "int8 dim not a multiple of 32";
  EXPECT_EQ(kernels_->attention(a, a, b, KvType::kF32, 2, 4, 4, p, a + 16).code(),
            StatusCode::kInvalidArgument)
      << "out overlaps q";
  EXPECT_TRUE(kernels_->synchronize().ok()) << "nothing reached the device";
}

}  // namespace
}  // namespace siesta
