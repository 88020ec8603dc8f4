// What a generation request is checked against and answered with: the served model's id, its
// context, the conversations kept, the server's default length, and the fingerprint OpenAI's
// answers carry. Every API's parser (openai_json.h, anthropic_json.h, llama_json.h) takes one.
//
// Thread rule: a value; served_model() is a pure function.
#pragma once

#include <cstdint>
#include <string>

#include "engine/model_config.h"
#include "server/server_config.h"

namespace siesta::server {

struct ServedModel {
  std::string name;  // the id answers carry: --alias, or the model's name
  uint32_t context = 0;
  uint32_t sessions = 1;  // conversations kept: id_slot's range
  // The tokens a request that names none generates (--n-predict): -1 until a stop string
  // matches or the context is full; else at least 1, lowered to what the context leaves.
  int64_t n_predict = -1;
  // OpenAI's system_fingerprint: "fp_" and 12 hex digits of a SHA-256 over the server's
  // version and every model setting that changes an answer (layers, widths, context, KV type,
  // weight seed...), so two servers answer alike exactly when their fingerprints match.
  std::string system_fingerprint{};
};

// The served model of a server running `model` with `config`. Never fails (an OpenSSL failure
// of the digest aborts, as random_id() does).
ServedModel served_model(const ServerConfig& config, const engine::ModelConfig& model);

}  // namespace siesta::server
