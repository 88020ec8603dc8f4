// The served model a request is checked against: the id (--alias), the default length
// (--n-predict), and OpenAI's system_fingerprint, which changes exactly with what changes an
// answer.
#include "server/served_model.h"

#include <gtest/gtest.h>

#include <regex>

namespace siesta::server {
namespace {

engine::ModelConfig tiny() {
  Result<engine::ModelConfig> config = engine::model_config_from_spec("synthetic:tiny");
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  return *config;
}

TEST(ServedModelTest, CarriesTheAliasTheContextTheSessionsAndTheDefaultLength) {
  ServerConfig config;
  config.alias = "my-model";
  config.n_predict = 32;
  const ServedModel served = served_model(config, tiny());
  EXPECT_EQ(served.name, "my-model");
  EXPECT_EQ(served.context, tiny().context);
  EXPECT_EQ(served.sessions, config.sessions());
  EXPECT_EQ(served.n_predict, 32);
}

TEST(ServedModelTest, TheFingerprintFollowsWhatChangesAnAnswer) {
  const ServerConfig config;
  const std::string base = served_model(config, tiny()).system_fingerprint;
  EXPECT_TRUE(std::regex_match(base, std::regex("fp_[0-9a-f]{12}"))) << base;
  EXPECT_EQ(served_model(config, tiny()).system_fingerprint, base);
  // How the prompt is read in blocks changes no answer.
  engine::ModelConfig blocks = tiny();
  blocks.prefill_block = 1;
  EXPECT_EQ(served_model(config, blocks).system_fingerprint, base);
  // The alias and the default length are the server's, not the model's.
  ServerConfig aliased;
  aliased.alias = "other";
  aliased.n_predict = 5;
  EXPECT_EQ(served_model(aliased, tiny()).system_fingerprint, base);
  engine::ModelConfig seed = tiny();
  seed.weight_seed += 1;
  engine::ModelConfig context = tiny();
  context.context /= 2;
  engine::ModelConfig kv = tiny();
  kv.kv_type = kv.kv_type == KvType::kF32 ? KvType::kInt8 : KvType::kF32;
  for (const engine::ModelConfig& changed : {seed, context, kv}) {
    EXPECT_NE(served_model(config, changed).system_fingerprint, base);
  }
}

}  // namespace
}  // namespace siesta::server
