#include "server/served_model.h"

#include <cstdio>
#include <cstdlib>
#include <span>

#include "core/snapshot/chunk_sealer.h"
#include "server/server_flags.h"

namespace siesta::server {
namespace {

std::string fingerprint_of(const engine::ModelConfig& model) {
  // prefill_block changes no answer (model_config.h); everything else here may.
  std::string text = server_version_text();
  text += "|" + model.name + "|" + std::to_string(model.layers) + "|" + std::to_string(model.dim) +
          "|" + std::to_string(model.heads) + "|" + std::to_string(model.ffn_dim) + "|" +
          std::to_string(model.context) + "|" + std::to_string(static_cast<int>(model.kv_type)) +
          "|" + std::to_string(model.recurrent_after) + "|" +
          std::to_string(model.checkpoint_interval) + "|" + std::to_string(model.weight_seed) +
          "|" + std::to_string(model.rope_theta) + "|" + std::to_string(model.norm_eps);
  Result<snapshot::HeaderDigest> digest =
      sha256(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  if (!digest.ok()) {
    (void)std::fprintf(stderr, "siesta-server: no digest for the system fingerprint: %s\n",
                       digest.status().to_string().c_str());
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "fp_";
  for (size_t i = 0; i < 6; ++i) {
    out += kHex[(*digest)[i] >> 4];
    out += kHex[(*digest)[i] & 0xf];
  }
  return out;
}

}  // namespace

ServedModel served_model(const ServerConfig& config, const engine::ModelConfig& model) {
  ServedModel served;
  served.name = config.model_id();
  served.context = model.context;
  served.sessions = config.sessions();
  served.n_predict = config.n_predict;
  served.system_fingerprint = fingerprint_of(model);
  return served;
}

}  // namespace siesta::server
