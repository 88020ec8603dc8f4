// ModelConfig: the shape of the reference model (a small Llama-style decoder with one
// recurrent layer) and its named sizes.
//
// The model: a byte vocabulary (256 tokens), `layers` attention blocks (RMSNorm, Q/K/V
// projections, RoPE, causal attention over the KV cache, output projection, SwiGLU FFN), and
// after attention block `recurrent_after` one recurrent block (RMSNorm, input and gate
// projections, the gated update of a `dim`-float state, output projection). All weights are
// f32, generated from `weight_seed`. The recurrent state cannot be truncated back to an
// earlier position, which is why the session copies it to host memory every
// `checkpoint_interval` tokens.
//
// Named sizes (`--model synthetic:<size>`; `--ctx` and `--kv-type` override the context and
// the KV type; a --ctx below the checkpoint interval shrinks the interval to the context):
//   tiny    unit tests: a few KiB of KV per token, runs in microseconds
//   small   e2e tests and the default server model
//   medium  benchmarks: about the seed's session size (~300 MB of KV) at its default context
//   large   benchmarks: several GiB of KV at its default context
// Exact figures (recurrent_after = layers / 2; weight_seed = FNV-1a 64 of the name; "KV/token"
// is every layer's K and V row; "device" is the session's device reservation before rounding
// to the backend's granularity: RoPE table + scratch + KV + recurrent state; "host" is the
// session.meta + session.tokens + recurrent.checkpoints + recurrent.prompt_end range before
// page rounding):
//   size    layers dim  heads ffn  ctx   kv  interval KV/token KV@ctx  device B   host B weights B
//   tiny    2      64   4     128  256   f32 16       1024 B   256 KiB 710912     6144   509440
//   small   4      128  4     256  2048  f16 64       2048 B   4 MiB   5384704    20480  3085312
//   medium  8      512  8     1024 8192  f32 256      32 KiB   256 MiB 275845120  77312  88117248
//   large   16     1024 16    2048 32768 f32 1024     128 KiB  4 GiB   4326955008 169472 685907968
// model_config_table() lists them; docs/IDLE_SESSION.md repeats it.
//
// Thread rule: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "compute/kernels.h"
#include "core/base/status.h"

namespace siesta::engine {

inline constexpr uint32_t kVocabSize = 256;  // one token per byte
// Generated tokens are limited to printable ASCII, so generated text is always valid UTF-8
// and a client that sends the answer back gets exactly the same tokens.
inline constexpr uint32_t kFirstPrintable = 0x20;
inline constexpr uint32_t kLastPrintable = 0x7e;

// Prefill block sizes: a prompt is read in steps of at most prefill_block tokens, each a
// matrix-matrix pass through the model (engine/session.h). The session's scratch holds
// kMaxPrefillBlock rows whatever the choice, so the choice changes neither the session's
// layout nor its fingerprint (the bytes computed never depend on it).
inline constexpr uint32_t kMaxPrefillBlock = 128;

struct ModelConfig {
  std::string name;  // "synthetic:tiny", as /v1/models and /v1/status show it
  uint32_t layers = 0;
  uint32_t dim = 0;      // model width; also the KV row width and the recurrent state size
  uint32_t heads = 0;    // head_dim = dim / heads
  uint32_t ffn_dim = 0;  // SwiGLU hidden width
  uint32_t context = 0;  // tokens the session can hold
  KvType kv_type = KvType::kF32;
  uint32_t recurrent_after = 0;      // index of the attention block the recurrent block follows
  uint32_t checkpoint_interval = 0;  // tokens between host checkpoints of the recurrent state
  uint64_t weight_seed = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
  // Tokens a prefill step computes at most, up to kMaxPrefillBlock; 0 (the default): the
  // kernels' Kernels::preferred_prefill_block() (64 on the host, 128 on CUDA); 1 reads the
  // prompt one token at a time through the decode graph (the path every version before blocks
  // used). An engine option, not part of the model: the session's fingerprint leaves it out.
  uint32_t prefill_block = 0;

  uint32_t head_dim() const { return dim / heads; }
  // Bytes of one layer's K (or V) cache: context rows of kv_row_bytes(kv_type, dim).
  uint64_t kv_cache_bytes() const { return uint64_t{context} * kv_row_bytes(kv_type, dim); }
  // Every weight, in bytes (f32).
  uint64_t weight_bytes() const;

  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

// Checks what the kernels and the session need: every count > 0; dim a multiple of heads and
// of kKvInt8Block; head_dim even; recurrent_after < layers; 1 <= checkpoint_interval <=
// context; context <= kMaxContext; prefill_block <= kMaxPrefillBlock. Failure:
// InvalidArgument naming the field and the rule.
inline constexpr uint32_t kMaxContext = 1u << 20;
Status validate(const ModelConfig& config);

struct NamedModel {
  std::string_view size;  // "tiny"
  ModelConfig config;     // with its default context and KV type
};
std::span<const NamedModel> model_config_table();

// "synthetic:<size>" -> that configuration, with `context` and `kv_type` replacing the
// defaults when given, validated.
// Failure: InvalidArgument naming the accepted sizes for an unknown spec, or validate()'s.
Result<ModelConfig> model_config_from_spec(std::string_view spec,
                                           std::optional<uint32_t> context = std::nullopt,
                                           std::optional<KvType> kv_type = std::nullopt);

}  // namespace siesta::engine
