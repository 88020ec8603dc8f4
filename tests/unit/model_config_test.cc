// ModelConfig: the named sizes' figures, spec parsing with overrides, and validate()'s rules.
#include "engine/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

namespace siesta::engine {
namespace {

using ::testing::HasSubstr;

TEST(ModelConfigTable, ListsTheFourSizesWithTheirDocumentedFigures) {
  const auto table = model_config_table();
  ASSERT_EQ(table.size(), 4u);
  std::set<uint64_t> seeds;
  for (const NamedModel& entry : table) {
    SCOPED_TRACE(std::string(entry.size));
    EXPECT_EQ(entry.config.name, "synthetic:" + std::string(entry.size));
    EXPECT_TRUE(validate(entry.config).ok()) << validate(entry.config).to_string();
    EXPECT_EQ(entry.config.recurrent_after, entry.config.layers / 2);
    seeds.insert(entry.config.weight_seed);
  }
  EXPECT_EQ(seeds.size(), 4u) << "every size has its own weight seed";

  EXPECT_EQ(table[0].size, "tiny");
  EXPECT_EQ(table[0].config.kv_cache_bytes() * 2 * table[0].config.layers, 256u * 1024);
  EXPECT_EQ(table[0].config.weight_bytes(), 509440u);
  EXPECT_EQ(table[1].size, "small");
  EXPECT_EQ(table[1].config.kv_type, KvType::kF16);
  EXPECT_EQ(table[1].config.kv_cache_bytes() * 2 * table[1].config.layers, 4u << 20);
  EXPECT_EQ(table[2].size, "medium");
  EXPECT_EQ(table[2].config.kv_cache_bytes() * 2 * table[2].config.layers, 256u << 20);
  EXPECT_EQ(table[2].config.weight_bytes(), 88117248u);
  EXPECT_EQ(table[3].size, "large");
  EXPECT_EQ(table[3].config.kv_cache_bytes() * 2 * table[3].config.layers, 4ull << 30);
}

TEST(ModelConfigTable, WeightBytesCountsEveryTensor) {
  ModelConfig c = model_config_table()[0].config;
  // tiny: dim 64, ffn 128, 2 layers, vocab 256.
  const uint64_t per_block = 2 * 64 + 4 * 64 * 64 + 3 * 128 * 64;
  const uint64_t expected = 4 * (2 * per_block + (64 + 3 * 64 * 64) + 2 * 256 * 64 + 64);
  EXPECT_EQ(c.weight_bytes(), expected);
}

TEST(ModelConfigFromSpec, ReturnsTheNamedSize) {
  Result<ModelConfig> tiny = model_config_from_spec("synthetic:tiny");
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  EXPECT_EQ(*tiny, model_config_table()[0].config);
  Result<ModelConfig> large = model_config_from_spec("synthetic:large");
  ASSERT_TRUE(large.ok());
  EXPECT_EQ(large->dim, 1024u);
}

TEST(ModelConfigFromSpec, OverridesContextAndKvType) {
  Result<ModelConfig> c = model_config_from_spec("synthetic:small", 512, KvType::kInt8);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->context, 512u);
  EXPECT_EQ(c->kv_type, KvType::kInt8);
  EXPECT_EQ(c->checkpoint_interval, 64u);
  EXPECT_EQ(c->weight_seed, model_config_table()[1].config.weight_seed)
      << "overrides change the session, not the weights";
}

TEST(ModelConfigFromSpec, AShortContextShrinksTheCheckpointInterval) {
  Result<ModelConfig> c = model_config_from_spec("synthetic:tiny", 8);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->context, 8u);
  EXPECT_EQ(c->checkpoint_interval, 8u);
}

TEST(ModelConfigFromSpec, UnknownSpecNamesTheAcceptedSizes) {
  for (const char* spec :
       {"synthetic:huge", "tiny", "synthetic:", "", "synthetic:tiny2", "Synthetic:tiny"}) {
    Result<ModelConfig> c = model_config_from_spec(spec);
    ASSERT_FALSE(c.ok()) << spec;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr("synthetic:tiny"));
    EXPECT_THAT(c.status().message(), HasSubstr("synthetic:large"));
  }
}

TEST(ModelConfigFromSpec, InvalidOverridesFailValidation) {
  Result<ModelConfig> zero = model_config_from_spec("synthetic:tiny", 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(zero.status().message(), HasSubstr("context"));
  Result<ModelConfig> huge = model_config_from_spec("synthetic:tiny", kMaxContext + 1);
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("context"));
  EXPECT_TRUE(model_config_from_spec("synthetic:tiny", kMaxContext).ok());
}

struct Breakage {
  const char* field;
  void (*apply)(ModelConfig&);
};

TEST(ModelConfigValidate, NamesTheFieldAndTheRule) {
  const Breakage cases[] = {
      {"layers", [](ModelConfig& c) { c.layers = 0; }},
      {"dim", [](ModelConfig& c) { c.dim = 0; }},
      {"heads", [](ModelConfig& c) { c.heads = 0; }},
      {"ffn_dim", [](ModelConfig& c) { c.ffn_dim = 0; }},
      {"context", [](ModelConfig& c) { c.context = 0; }},
      {"checkpoint_interval", [](ModelConfig& c) { c.checkpoint_interval = 0; }},
      {"heads", [](ModelConfig& c) { c.heads = 3; }},  // 64 % 3 != 0
      {"int8 KV block", [](ModelConfig& c) { c.dim = 48, c.heads = 4; }},
      {"head_dim", [](ModelConfig& c) { c.dim = 96, c.heads = 32; }},  // head_dim 3
      {"recurrent_after", [](ModelConfig& c) { c.recurrent_after = c.layers; }},
      {"checkpoint_interval", [](ModelConfig& c) { c.checkpoint_interval = c.context + 1; }},
      {"context", [](ModelConfig& c) { c.context = kMaxContext + 1; }},
      {"rope_theta", [](ModelConfig& c) { c.rope_theta = 0.0f; }},
      {"norm_eps", [](ModelConfig& c) { c.norm_eps = -1.0f; }},
      {"prefill_block", [](ModelConfig& c) { c.prefill_block = kMaxPrefillBlock + 1; }},
  };
  for (const Breakage& b : cases) {
    ModelConfig c = model_config_table()[0].config;
    b.apply(c);
    const Status s = validate(c);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << b.field;
    EXPECT_THAT(s.message(), HasSubstr(b.field));
  }
}

TEST(ModelConfigValidate, AcceptsBoundaryValues) {
  ModelConfig c = model_config_table()[0].config;
  c.layers = 1;
  c.recurrent_after = 0;
  c.checkpoint_interval = c.context;
  EXPECT_TRUE(validate(c).ok()) << validate(c).to_string();
  c.checkpoint_interval = 1;
  EXPECT_TRUE(validate(c).ok());
  for (uint32_t block : {0u, 1u, kMaxPrefillBlock}) {  // 0: the kernels' choice
    c.prefill_block = block;
    EXPECT_TRUE(validate(c).ok()) << block;
  }
}

}  // namespace
}  // namespace siesta::engine
