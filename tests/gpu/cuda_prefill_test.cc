// Blocked prefill on the GPU (CudaVmmBackend + CudaKernels): random prompts cut at random
// points into random block sizes (1 included) give, bit for bit, the KV rows, recurrent state,
// checkpoints, history, next logits and greedy continuation of the same prompt fed one token
// at a time (the decode graph), also after a cached prefix; and the CUDA session agrees with
// the host kernels' session on the simulator within the kernels' tolerances (the logits; the
// text where no two logits are closer than that). The seed is printed; SIESTA_PREFILL_SEED
// replays a run. Skips, printing why, where CUDA is unavailable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda_vmm/cuda_kernels.h"
#include "backends/cuda_vmm/cuda_vmm_backend.h"
#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "core/memory/host_vmm.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/session.h"
#include "tests/support/prefill_split.h"

namespace siesta::engine {
namespace {

using test_util::capture;
using test_util::feed_in_blocks;
using test_util::SessionBytes;

uint64_t seed() {
  static const uint64_t value = [] {
    const char* fixed = std::getenv("SIESTA_PREFILL_SEED");
    const uint64_t s =
        fixed != nullptr ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
    std::printf("cuda prefill seed: SIESTA_PREFILL_SEED=%llu\n",
                static_cast<unsigned long long>(s));
    return s;
  }();
  return value;
}

// A backend, its kernels, a model and two sessions of it.
struct Device {
  std::unique_ptr<MemoryBackend> backend;
  std::unique_ptr<Kernels> kernels;
  HostVmm host;
  std::unique_ptr<Model> model;

  Result<std::unique_ptr<Session>> session() {
    return Session::create(*model, *backend, *kernels, host);
  }
};

Status open_cuda(const ModelConfig& config, Device& d) {
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<CudaVmmBackend> backend, CudaVmmBackend::create({}));
  d.backend = std::move(backend);
  SIESTA_ASSIGN_OR_RETURN(d.kernels, CudaKernels::create(0));
  SIESTA_ASSIGN_OR_RETURN(d.model, Model::load(config, *d.backend, *d.kernels));
  return Status::Ok();
}

Status open_host(const ModelConfig& config, Device& d) {
  SimBackendOptions options;
  options.capacity_bytes = 4ull << 30;
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<SimBackend> sim, SimBackend::create(options));
  SIESTA_ASSIGN_OR_RETURN(std::unique_ptr<HostKernels> kernels, HostKernels::create(*sim));
  d.kernels = std::move(kernels);
  d.backend = std::move(sim);
  SIESTA_ASSIGN_OR_RETURN(d.model, Model::load(config, *d.backend, *d.kernels));
  return Status::Ok();
}

std::vector<Token> random_prompt(std::mt19937_64& rng, size_t length) {
  std::vector<Token> prompt(length);
  std::uniform_int_distribution<int> byte(0, 255);
  for (Token& t : prompt) t = static_cast<Token>(byte(rng));
  return prompt;
}

std::vector<uint32_t> random_cuts(std::mt19937_64& rng) {
  std::uniform_int_distribution<uint32_t> size(1, kMaxPrefillBlock);
  std::uniform_int_distribution<int> small(0, 3);
  std::vector<uint32_t> cuts(std::uniform_int_distribution<int>(1, 6)(rng));
  for (uint32_t& c : cuts)
    c = small(rng) == 0 ? std::uniform_int_distribution<uint32_t>(1, 3)(rng) : size(rng);
  return cuts;
}

class CudaPrefillTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string reason = CudaVmmBackend::unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << "CUDA unavailable: " << reason;
  }
  // synthetic:tiny at a context that crosses an attention chunk, each KV type; small as named.
  ModelConfig config() const {
    const std::string& p = GetParam();
    if (p == "small") return model_config_from_spec("synthetic:small").value();
    return model_config_from_spec("synthetic:tiny", 1300, parse_kv_type(p).value()).value();
  }
};

TEST_P(CudaPrefillTest, ARandomSplitGivesTheBytesOfOneTokenAtATime) {
  ModelConfig c = config();
  c.prefill_block = kMaxPrefillBlock;  // each block's size is the cut's
  Device d;
  SIESTA_ASSERT_OK(open_cuda(c, d));
  std::mt19937_64 rng(seed() + std::hash<std::string>{}(GetParam()));
  for (int round = 0; round < 4; ++round) {
    const size_t length = std::uniform_int_distribution<size_t>(2, c.context - 40)(rng);
    const std::vector<Token> prompt = random_prompt(rng, length);
    const std::vector<uint32_t> cuts = random_cuts(rng);
    SCOPED_TRACE("round " + std::to_string(round) + ": " + std::to_string(length) +
                 " tokens, first cut " + std::to_string(cuts[0]));
    SIESTA_ASSERT_OK_AND_ASSIGN(auto one_by_one, d.session());
    SIESTA_ASSERT_OK_AND_ASSIGN(auto blocked, d.session());
    const std::vector<uint32_t> ones = {1};
    SIESTA_ASSERT_OK(feed_in_blocks(*one_by_one, prompt, 0, ones));
    // The blocked session first reads a prefix, then the whole prompt as a returning
    // conversation does: the cached prefix is reused (down to its last checkpoint).
    const size_t prefix = std::uniform_int_distribution<size_t>(1, length - 1)(rng);
    SIESTA_ASSERT_OK(feed_in_blocks(*blocked, std::span(prompt).first(prefix), 0, cuts));
    SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, blocked->reuse_prefix(prompt));
    SIESTA_ASSERT_OK(feed_in_blocks(*blocked, prompt, reused, cuts));
    SIESTA_ASSERT_OK_AND_ASSIGN(SessionBytes want,
                                capture(*one_by_one, *d.backend, *d.kernels, 16));
    SIESTA_ASSERT_OK_AND_ASSIGN(SessionBytes got, capture(*blocked, *d.backend, *d.kernels, 16));
    EXPECT_EQ(test_util::first_difference(want, got), "");
  }
}

TEST_P(CudaPrefillTest, CudaAgreesWithTheHostKernelsWithinTheirTolerance) {
  const ModelConfig c = config();
  Device cuda, host;
  SIESTA_ASSERT_OK(open_cuda(c, cuda));
  SIESTA_ASSERT_OK(open_host(c, host));
  std::mt19937_64 rng(seed() + 7);
  const std::vector<Token> prompt = random_prompt(rng, c.context - 40);
  std::vector<float> logits[2];
  int i = 0;
  for (Device* d : {&cuda, &host}) {
    SIESTA_ASSERT_OK_AND_ASSIGN(auto s, d->session());
    const std::vector<uint32_t> cuts = {64};
    SIESTA_ASSERT_OK(feed_in_blocks(*s, prompt, 0, cuts));
    SIESTA_ASSERT_OK_AND_ASSIGN(logits[i++], s->next_logits());
  }
  float worst = 0, scale = 0;
  for (size_t k = 0; k < logits[0].size(); ++k) {
    scale = std::max(scale, std::fabs(logits[1][k]));
    worst = std::max(worst, std::fabs(logits[0][k] - logits[1][k]));
  }
  std::printf(
      "%s: %zu tokens, largest |cuda - host| logit difference %.3g (largest |logit| %.3g)\n",
      c.name.c_str(), prompt.size(), worst, scale);
  // rms_norm's sum and expf/tanhf differ by ulps between the backends; through every layer
  // the logits may drift by this much, never more.
  EXPECT_LE(worst, 1e-3f * scale + 1e-4f);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaPrefillTest, ::testing::Values("f32", "f16", "int8", "small"),
                         [](const auto& p) { return p.param; });

}  // namespace
}  // namespace siesta::engine
