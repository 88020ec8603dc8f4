// Shared by the engine's Session tests: a simulated device with synthetic:<size> loaded and a
// session on it, prefill/answer helpers that read what a client would see (logit bits and a
// greedy continuation), and a fixture parameterised by the KV type.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "core/memory/host_vmm.h"
#include "engine/model.h"
#include "engine/model_config.h"
#include "engine/session.h"
#include "engine/tokenizer.h"
#include "tests/support/backend_test_util.h"

namespace siesta::engine::test_util {

using snapshot::Extent;

// One simulated device with a model and a session on it. Members are destroyed in reverse
// order: the session before the model, both before the kernels and the backend.
struct Rig {
  std::unique_ptr<SimBackend> backend;
  std::unique_ptr<HostKernels> kernels;
  HostVmm host;
  std::unique_ptr<Model> model;
  std::unique_ptr<Session> session;

  Status init(const ModelConfig& config) {
    SimBackendOptions options;
    options.granularity = 64u << 10;  // small sessions need not pin 2 MiB each
    options.max_chunk_bytes = 16u << 20;
    SIESTA_ASSIGN_OR_RETURN(backend, SimBackend::create(options));
    SIESTA_ASSIGN_OR_RETURN(kernels, HostKernels::create(*backend));
    SIESTA_ASSIGN_OR_RETURN(model, Model::load(config, *backend, *kernels));
    SIESTA_ASSIGN_OR_RETURN(session, Session::create(*model, *backend, *kernels, host));
    return Status::Ok();
  }
};

inline ModelConfig tiny(KvType type, std::optional<uint32_t> context = std::nullopt) {
  return model_config_from_spec("synthetic:tiny", context, type).value();
}

// reuse_prefix + feed of the rest: returns the tokens reused.
inline Result<uint32_t> prefill(Session& session, std::string_view prompt) {
  const std::vector<Token> tokens = encode(prompt);
  SIESTA_ASSIGN_OR_RETURN(uint32_t reused, session.reuse_prefix(tokens));
  for (size_t i = reused; i < tokens.size(); ++i) SIESTA_RETURN_IF_ERROR(session.feed(tokens[i]));
  return reused;
}

// What a client sees after a prompt: the next logits' bits and a greedy continuation.
struct Answer {
  std::vector<uint32_t> logit_bits;
  std::string text;
  friend bool operator==(const Answer&, const Answer&) = default;
};

inline Result<Answer> answer(Session& session, int tokens) {
  Answer out;
  SIESTA_ASSIGN_OR_RETURN(std::vector<float> logits, session.next_logits());
  out.logit_bits.resize(logits.size());
  std::memcpy(out.logit_bits.data(), logits.data(), logits.size() * sizeof(float));
  for (int i = 0; i < tokens; ++i) {
    SIESTA_ASSIGN_OR_RETURN(Token next, session.greedy_next());
    out.text.push_back(static_cast<char>(next));
    SIESTA_RETURN_IF_ERROR(session.feed(next));
  }
  return out;
}

// The answer a fresh session gives to `prompt`, read from the start.
inline Result<Answer> fresh_answer(const ModelConfig& config, std::string_view prompt, int tokens) {
  Rig rig;
  SIESTA_RETURN_IF_ERROR(rig.init(config));
  SIESTA_ASSIGN_OR_RETURN(uint32_t reused, prefill(*rig.session, prompt));
  if (reused != 0) return Internal("a fresh session reused " + std::to_string(reused));
  return answer(*rig.session, tokens);
}

inline std::map<std::string, SnapshotRegion> regions_by_name(const Session& session) {
  std::map<std::string, SnapshotRegion> out;
  for (SnapshotRegion& r : session.snapshot_regions()) out[r.layout.name] = r;
  return out;
}

inline std::vector<Extent> prefix(uint64_t bytes) {
  if (bytes == 0) return {};
  return {Extent{0, bytes}};
}

constexpr std::string_view kPrompt =
    "Once upon a time, a session fell asleep and woke at the same address.";  // 69 tokens

class TinySessionTest : public ::testing::TestWithParam<KvType> {
 protected:
  void SetUp() override {
    config_ = tiny(GetParam());
    SIESTA_ASSERT_OK(rig_.init(config_));
  }
  Session& session() { return *rig_.session; }

  ModelConfig config_;
  Rig rig_;
};

}  // namespace siesta::engine::test_util
