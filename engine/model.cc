#include "engine/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/round_up.h"
#include "core/snapshot/chunk_sealer.h"

namespace siesta::engine {
namespace {

constexpr uint64_t kTensorAlignment = 256;  // what any kernel's vector loads want
constexpr size_t kUploadPieceFloats = (4u << 20) / sizeof(float);  // bounds host memory

constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A uniform draw in [-1, 1) that depends only on (seed, tensor, element): no generator state,
// so tensors can be drawn in pieces and in any order.
inline float draw(uint64_t tensor_key, uint64_t element) {
  const uint64_t bits = splitmix64(tensor_key ^ splitmix64(element));
  return static_cast<float>(static_cast<double>(bits >> 40) / double(1ull << 23) - 1.0);
}

enum class Init : uint8_t { kNorm, kScaled };

struct Tensor {
  DeviceAddress* slot;  // where the tensor's address is stored in the Model
  uint64_t elements;
  Init init;
  uint32_t fan_in;  // kScaled: draws are divided by sqrt(fan_in)
  uint64_t offset = 0;
};

}  // namespace

Result<std::unique_ptr<Model>> Model::load(const ModelConfig& config, MemoryBackend& backend,
                                           Kernels& kernels) {
  SIESTA_RETURN_IF_ERROR(validate(config));
  std::unique_ptr<Model> model(new Model());
  model->config_ = config;
  model->blocks_.resize(config.layers);

  const uint64_t d = config.dim;
  const uint64_t f = config.ffn_dim;
  // The tensor order fixes each tensor's index, hence its draws; do not reorder.
  std::vector<Tensor> tensors;
  tensors.push_back({&model->embedding_, kVocabSize * d, Init::kScaled, 1});
  for (AttentionWeights& b : model->blocks_) {
    tensors.push_back({&b.attn_norm, d, Init::kNorm, 1});
    tensors.push_back({&b.wq, d * d, Init::kScaled, config.dim});
    tensors.push_back({&b.wk, d * d, Init::kScaled, config.dim});
    tensors.push_back({&b.wv, d * d, Init::kScaled, config.dim});
    tensors.push_back({&b.wo, d * d, Init::kScaled, config.dim});
    tensors.push_back({&b.ffn_norm, d, Init::kNorm, 1});
    tensors.push_back({&b.w_gate, f * d, Init::kScaled, config.dim});
    tensors.push_back({&b.w_up, f * d, Init::kScaled, config.dim});
    tensors.push_back({&b.w_down, d * f, Init::kScaled, config.ffn_dim});
  }
  RecurrentWeights& r = model->recurrent_;
  tensors.push_back({&r.norm, d, Init::kNorm, 1});
  tensors.push_back({&r.w_input, d * d, Init::kScaled, config.dim});
  tensors.push_back({&r.w_gate, d * d, Init::kScaled, config.dim});
  tensors.push_back({&r.w_out, d * d, Init::kScaled, config.dim});
  tensors.push_back({&model->final_norm_, d, Init::kNorm, 1});
  tensors.push_back({&model->output_, kVocabSize * d, Init::kScaled, config.dim});

  uint64_t total = 0;
  for (Tensor& t : tensors) {
    t.offset = total;
    total = round_up(total + t.elements * sizeof(float), kTensorAlignment);
  }

  SIESTA_ASSIGN_OR_RETURN(model->memory_, ReservedRange::reserve(backend, total));
  const DeviceRange range = model->memory_.range();
  if (Status s = backend.commit(range); !s.ok()) {
    return s.with_context("committing " + std::to_string(range.size) + " bytes of weights");
  }

  std::vector<uint8_t> piece_digests;  // each piece's SHA-256, hashed once more at the end
  auto upload_all = [&]() -> Status {
    std::vector<float> piece(std::min<uint64_t>(kUploadPieceFloats, total / sizeof(float)));
    for (size_t index = 0; index < tensors.size(); ++index) {
      const Tensor& t = tensors[index];
      *t.slot = range.base + t.offset;
      const uint64_t key = splitmix64(config.weight_seed ^ splitmix64(0x5e57a000 + index));
      const float scale =
          t.init == Init::kNorm ? 0.1f : 1.0f / std::sqrt(static_cast<float>(t.fan_in));
      for (uint64_t first = 0; first < t.elements; first += piece.size()) {
        const uint64_t count = std::min<uint64_t>(piece.size(), t.elements - first);
        for (uint64_t i = 0; i < count; ++i) {
          const float u = draw(key, first + i) * scale;
          piece[i] = t.init == Init::kNorm ? 1.0f + u : u;
        }
        const auto bytes = std::as_bytes(std::span<const float>(piece.data(), count));
        SIESTA_ASSIGN_OR_RETURN(
            const snapshot::HeaderDigest digest,
            sha256({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}));
        piece_digests.insert(piece_digests.end(), digest.begin(), digest.end());
        // upload() copies the source before returning, so the piece can be refilled at once.
        SIESTA_RETURN_IF_ERROR(kernels.upload(bytes, *t.slot + first * sizeof(float)));
      }
    }
    SIESTA_ASSIGN_OR_RETURN(model->weights_digest_, sha256(piece_digests));
    return kernels.synchronize();
  };
  if (Status s = upload_all(); !s.ok()) {
    // No upload may still be in flight when the reservation goes away with `model`.
    kernels.synchronize().ignore();
    return s;
  }
  return model;
}

}  // namespace siesta::engine
