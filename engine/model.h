// Model: the reference model's weights, generated from the configuration's seed and placed in
// device memory once, in a reservation of their own that no session region shares and that
// the offload never releases (model weights never move).
//
// Weights are drawn on the host from a counter-based generator keyed by (seed, tensor index,
// element index), so every tensor is the same whatever the order or the machine, and uploaded
// through the Kernels. Values are uniform in [-1, 1] / sqrt(fan_in); norm weights are 1 + a
// small draw.
//
// Thread rule: immutable after load(); the addresses may be read from any thread.
#pragma once

#include <memory>
#include <vector>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "core/snapshot/snapshot_format.h"
#include "engine/model_config.h"

namespace siesta::engine {

struct AttentionWeights {
  DeviceAddress attn_norm = 0;  // [dim]
  DeviceAddress wq = 0;         // [dim][dim]
  DeviceAddress wk = 0;         // [dim][dim]
  DeviceAddress wv = 0;         // [dim][dim]
  DeviceAddress wo = 0;         // [dim][dim]
  DeviceAddress ffn_norm = 0;   // [dim]
  DeviceAddress w_gate = 0;     // [ffn_dim][dim]
  DeviceAddress w_up = 0;       // [ffn_dim][dim]
  DeviceAddress w_down = 0;     // [dim][ffn_dim]
};

struct RecurrentWeights {
  DeviceAddress norm = 0;     // [dim]
  DeviceAddress w_input = 0;  // [dim][dim]
  DeviceAddress w_gate = 0;   // [dim][dim]
  DeviceAddress w_out = 0;    // [dim][dim]
};

class Model {
 public:
  // Validates `config`, reserves and commits one range for every weight, generates and
  // uploads them, and waits for the uploads.
  // Failure: validate()'s InvalidArgument; the backend's OutOfMemory / DeviceError; the
  // kernels' errors. Nothing stays reserved on failure.
  // `backend` and `kernels` must outlive the model.
  static Result<std::unique_ptr<Model>> load(const ModelConfig& config, MemoryBackend& backend,
                                             Kernels& kernels);

  const ModelConfig& config() const { return config_; }
  const std::vector<AttentionWeights>& blocks() const { return blocks_; }
  const RecurrentWeights& recurrent() const { return recurrent_; }
  DeviceAddress embedding() const { return embedding_; }    // [vocab][dim]
  DeviceAddress final_norm() const { return final_norm_; }  // [dim]
  DeviceAddress output() const { return output_; }          // [vocab][dim]
  // The reservation holding every weight.
  DeviceRange weight_range() const { return memory_.range(); }
  // SHA-256 over the SHA-256 of each uploaded piece of weights (4 MiB of floats, in upload
  // order): the weights' identity in a session's fingerprint.
  const snapshot::HeaderDigest& weights_digest() const { return weights_digest_; }

 private:
  Model() = default;
  ModelConfig config_;
  ReservedRange memory_;
  std::vector<AttentionWeights> blocks_;
  RecurrentWeights recurrent_;
  DeviceAddress embedding_ = 0;
  DeviceAddress final_norm_ = 0;
  DeviceAddress output_ = 0;
  snapshot::HeaderDigest weights_digest_{};
};

}  // namespace siesta::engine
