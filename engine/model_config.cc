#include "engine/model_config.h"

#include <array>
#include <cmath>
#include <string>

#include "core/base/log_text.h"

namespace siesta::engine {
namespace {

// FNV-1a of the name: each named size gets its own fixed weight seed, and the seed is visible
// from the name alone (no table of magic numbers to keep in step).
constexpr uint64_t seed_from_name(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

ModelConfig named(std::string_view size, uint32_t layers, uint32_t dim, uint32_t heads,
                  uint32_t ffn_dim, uint32_t context, KvType kv_type, uint32_t interval) {
  ModelConfig config;
  config.name = "synthetic:" + std::string(size);
  config.layers = layers;
  config.dim = dim;
  config.heads = heads;
  config.ffn_dim = ffn_dim;
  config.context = context;
  config.kv_type = kv_type;
  config.recurrent_after = layers / 2;  // 0 for one layer
  config.checkpoint_interval = interval;
  config.weight_seed = seed_from_name(config.name);
  return config;
}

const std::array<NamedModel, 4>& table() {
  // The figures are in model_config.h's comment; keep both in step.
  static const std::array<NamedModel, 4> kTable = {
      NamedModel{"tiny", named("tiny", 2, 64, 4, 128, 256, KvType::kF32, 16)},
      NamedModel{"small", named("small", 4, 128, 4, 256, 2048, KvType::kF16, 64)},
      NamedModel{"medium", named("medium", 8, 512, 8, 1024, 8192, KvType::kF32, 256)},
      NamedModel{"large", named("large", 16, 1024, 16, 2048, 32768, KvType::kF32, 1024)},
  };
  return kTable;
}

Status field_error(std::string_view field, uint64_t value, std::string_view rule) {
  return InvalidArgument("model config: " + std::string(field) + " = " + std::to_string(value) +
                         ": " + std::string(rule));
}

}  // namespace

uint64_t ModelConfig::weight_bytes() const {
  const uint64_t d = dim;
  const uint64_t f = ffn_dim;
  const uint64_t per_block = 2 * d + 4 * d * d + 3 * f * d;  // two norms, Q K V O, SwiGLU
  const uint64_t recurrent = d + 3 * d * d;                  // norm, input, gate, output
  const uint64_t ends = 2 * uint64_t{kVocabSize} * d + d;    // embedding, output, final norm
  return 4 * (uint64_t{layers} * per_block + recurrent + ends);
}

Status validate(const ModelConfig& c) {
  const std::pair<std::string_view, uint32_t> counts[] = {
      {"layers", c.layers},   {"dim", c.dim},
      {"heads", c.heads},     {"ffn_dim", c.ffn_dim},
      {"context", c.context}, {"checkpoint_interval", c.checkpoint_interval},
  };
  for (const auto& [field, value] : counts) {
    if (value == 0) return field_error(field, value, "must be greater than 0");
  }
  if (c.dim % c.heads != 0) {
    return field_error("dim", c.dim,
                       "must be a multiple of heads (" + std::to_string(c.heads) + ")");
  }
  if (c.dim % kKvInt8Block != 0) {
    return field_error(
        "dim", c.dim,
        "must be a multiple of the int8 KV block (" + std::to_string(kKvInt8Block) + ")");
  }
  if (c.head_dim() % 2 != 0) {
    return field_error("head_dim", c.head_dim(), "must be even (RoPE rotates pairs)");
  }
  if (c.recurrent_after >= c.layers) {
    return field_error("recurrent_after", c.recurrent_after,
                       "must be less than layers (" + std::to_string(c.layers) + ")");
  }
  if (c.checkpoint_interval > c.context) {
    return field_error("checkpoint_interval", c.checkpoint_interval,
                       "must be at most context (" + std::to_string(c.context) + ")");
  }
  if (c.prefill_block > kMaxPrefillBlock) {
    return field_error("prefill_block", c.prefill_block,
                       "must be at most " + std::to_string(kMaxPrefillBlock));
  }
  if (c.context > kMaxContext) {
    return field_error("context", c.context, "must be at most " + std::to_string(kMaxContext));
  }
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0.0f)) {
    return InvalidArgument("model config: rope_theta must be finite and greater than 0");
  }
  if (!(std::isfinite(c.norm_eps) && c.norm_eps > 0.0f)) {
    return InvalidArgument("model config: norm_eps must be finite and greater than 0");
  }
  return Status::Ok();
}

std::span<const NamedModel> model_config_table() { return table(); }

Result<ModelConfig> model_config_from_spec(std::string_view spec, std::optional<uint32_t> context,
                                           std::optional<KvType> kv_type) {
  constexpr std::string_view kPrefix = "synthetic:";
  std::string accepted;
  for (const NamedModel& entry : table()) {
    if (!accepted.empty()) accepted += ", ";
    accepted += std::string(kPrefix) + std::string(entry.size);
    if (spec.size() > kPrefix.size() && spec.substr(0, kPrefix.size()) == kPrefix &&
        spec.substr(kPrefix.size()) == entry.size) {
      ModelConfig config = entry.config;
      if (context.has_value()) {
        config.context = *context;
        // A context shorter than the default interval still gets checkpoints (at its end):
        // the interval shrinks with it rather than making a short --ctx invalid.
        if (config.context > 0 && config.checkpoint_interval > config.context) {
          config.checkpoint_interval = config.context;
        }
      }
      if (kv_type.has_value()) config.kv_type = *kv_type;
      SIESTA_RETURN_IF_ERROR(validate(config));
      return config;
    }
  }
  // The spec came from outside: quoted, so the message stays one line (found by the flags
  // fuzzer).
  return InvalidArgument("unknown model " + quote_for_log(spec) + "; accepted: " + accepted);
}

}  // namespace siesta::engine
