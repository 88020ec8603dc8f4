// Session memory as the offload sees it, on the simulator with synthetic:tiny: used extents,
// graph replay after the memory is released and committed again at the same addresses,
// relocation, impossible restored state, fingerprints, layout figures, out of memory at
// create.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "core/memory/device_copy.h"
#include "engine/session.h"
#include "engine/session_layout.h"
#include "tests/support/engine_test_util.h"

namespace siesta::engine {
namespace {

using namespace ::siesta::engine::test_util;  // NOLINT(google-build-using-namespace)
using ::testing::HasSubstr;

using SessionMemoryTest = TinySessionTest;

TEST_P(SessionMemoryTest, UsedExtentsGrowWithTheLength) {
  const uint64_t row = kv_row_bytes(GetParam(), config_.dim);
  const uint64_t state = config_.dim * sizeof(float);
  for (uint32_t target : {0u, 1u, 15u, 16u, 17u, 40u}) {
    SCOPED_TRACE("length " + std::to_string(target));
    while (session().length() < target) SIESTA_ASSERT_OK(session().feed('a'));
    auto regions = regions_by_name(session());
    ASSERT_EQ(regions.size(), 2u + 2u * config_.layers + 5u);
    EXPECT_TRUE(regions["constants.rope"].layout.extents.empty());
    EXPECT_EQ(regions["constants.rope"].layout.persist, snapshot::PersistKind::kReinit);
    EXPECT_TRUE(regions["scratch"].layout.extents.empty());
    EXPECT_EQ(regions["scratch"].layout.persist, snapshot::PersistKind::kDiscard);
    for (uint32_t l = 0; l < config_.layers; ++l) {
      for (const char* kv : {".k", ".v"}) {
        const SnapshotRegion& r = regions["layer." + std::to_string(l) + kv];
        EXPECT_EQ(r.place, SnapshotRegion::Place::kDevice);
        EXPECT_EQ(r.layout.size, config_.kv_cache_bytes());
        EXPECT_EQ(r.layout.extents, prefix(target * row));
      }
    }
    EXPECT_EQ(regions["recurrent.state"].layout.extents, prefix(state));
    EXPECT_EQ(regions["session.meta"].layout.extents, prefix(24));
    EXPECT_EQ(regions["session.meta"].place, SnapshotRegion::Place::kHost);
    EXPECT_EQ(regions["session.tokens"].layout.extents, prefix(target));
    EXPECT_EQ(regions["recurrent.checkpoints"].layout.extents, prefix(target / 16 * state));
    // Taken only where a prompt ends (Session::checkpoint_prompt_end(), by Generation).
    EXPECT_TRUE(regions["recurrent.prompt_end"].layout.extents.empty());
    const DeviceRange device = session().device_memory().at(0);
    HostRange* host = session().host_memory().at(0);
    for (const auto& [name, r] : regions) {
      if (r.place == SnapshotRegion::Place::kDevice) {
        EXPECT_TRUE(device.contains({r.device, r.layout.size})) << name;
        EXPECT_EQ(r.device % 256, 0u) << name;
      } else {
        EXPECT_GE(r.host, host->data()) << name;
        EXPECT_LE(r.host + r.layout.size, host->data() + host->size()) << name;
      }
    }
  }
}

// What the offload does, by hand: keep the saved extents, release the memory, commit fresh
// memory at the same addresses, copy the extents back, adopt.
void release_and_restore(Rig& rig) {
  Session& session = *rig.session;
  // The kernels' stream is not ordered with the backend's copies: without this the copies
  // below would read what the last kernels have yet to write (the simulator makes sure).
  SIESTA_ASSERT_OK(rig.kernels->synchronize());
  std::vector<std::pair<SnapshotRegion, std::vector<std::byte>>> saved;
  for (const SnapshotRegion& r : session.snapshot_regions()) {
    for (const Extent& e : r.layout.extents) {
      std::vector<std::byte> bytes(e.length);
      if (r.place == SnapshotRegion::Place::kDevice) {
        SIESTA_ASSERT_OK(copy_device_to_host(*rig.backend, r.device + e.offset, bytes));
      } else {
        std::memcpy(bytes.data(), r.host + e.offset, e.length);
      }
      SnapshotRegion one = r;
      one.layout.extents = {e};
      saved.emplace_back(one, std::move(bytes));
    }
  }
  const std::vector<DeviceRange> device = session.device_memory();
  for (DeviceRange range : device) SIESTA_ASSERT_OK(rig.backend->decommit(range));
  for (HostRange* host : session.host_memory()) SIESTA_ASSERT_OK(host->release());
  EXPECT_EQ(rig.backend->stats().committed_bytes, rig.model->weight_range().size);
  // Nothing may be read while released; only the length is kept in ordinary memory.
  SIESTA_EXPECT_CODE(session.reuse_prefix(encode("x")), StatusCode::kFailedPrecondition);

  for (DeviceRange range : device) SIESTA_ASSERT_OK(rig.backend->commit(range));
  for (HostRange* host : session.host_memory()) SIESTA_ASSERT_OK(host->commit());
  for (const auto& [r, bytes] : saved) {
    const uint64_t offset = r.layout.extents[0].offset;
    if (r.place == SnapshotRegion::Place::kDevice) {
      SIESTA_ASSERT_OK(copy_host_to_device(*rig.backend, bytes, r.device + offset));
    } else {
      std::memcpy(r.host + offset, bytes.data(), bytes.size());
    }
  }
  SIESTA_ASSERT_OK(session.adopt_restored_state());
}

TEST_P(SessionMemoryTest, TheGraphReplaysAfterTheMemoryIsReleasedAndCommittedAgain) {
  SIESTA_ASSERT_OK(prefill(session(), kPrompt));
  const uint32_t length = session().length();
  const DeviceRange device = session().device_memory().at(0);
  ASSERT_NO_FATAL_FAILURE(release_and_restore(rig_));
  EXPECT_EQ(session().device_memory().at(0), device);
  EXPECT_EQ(session().length(), length);
  EXPECT_EQ(decode(session().history()), kPrompt);
  // Scratch is not saved: the last logits are gone until the next feed.
  SIESTA_EXPECT_CODE(session().greedy_next(), StatusCode::kFailedPrecondition);
  SIESTA_EXPECT_CODE(session().next_logits(), StatusCode::kFailedPrecondition);

  Rig never_released;
  SIESTA_ASSERT_OK(never_released.init(config_));
  SIESTA_ASSERT_OK(prefill(*never_released.session, kPrompt));

  // The next turn extends the history: every restored KV row and the restored recurrent
  // state are read by the replayed graph.
  const std::string extended = std::string(kPrompt) + " Then?";
  for (Rig* rig : {&rig_, &never_released}) {
    SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(*rig->session, extended));
    EXPECT_EQ(reused, length);
  }
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer restored, answer(session(), 20));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer kept, answer(*never_released.session, 20));
  EXPECT_EQ(restored, kept) << "'" << restored.text << "' vs '" << kept.text << "'";

  // A second cycle, then a divergent prompt rolls back through the restored checkpoints.
  ASSERT_NO_FATAL_FAILURE(release_and_restore(rig_));
  const std::string edited = std::string(kPrompt.substr(0, 40)) + " again";
  SIESTA_ASSERT_OK_AND_ASSIGN(uint32_t reused, prefill(session(), edited));
  EXPECT_EQ(reused, 32u);
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer after, answer(session(), 8));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer full, fresh_answer(config_, edited, 8));
  EXPECT_EQ(after, full);
}

TEST_P(SessionMemoryTest, FeedAfterARelocationIsRefused) {
  SIESTA_ASSERT_OK(prefill(session(), "hello"));
  const DeviceAddress before = session().device_memory().at(0).base;
  SIESTA_ASSERT_OK(session().relocate_device_memory_for_testing());
  ASSERT_NE(session().device_memory().at(0).base, before);
  const Status fed = session().feed('!');
  SIESTA_EXPECT_CODE(fed, StatusCode::kFailedPrecondition);
  EXPECT_THAT(fed.message(), HasSubstr("recorded"));
  EXPECT_EQ(session().length(), 5u);
  // The copy is faithful: the relocated logits are the ones computed before.
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer moved, answer(session(), 0));
  SIESTA_ASSERT_OK_AND_ASSIGN(Answer fresh, fresh_answer(config_, "hello", 0));
  EXPECT_EQ(moved, fresh);
}

TEST_P(SessionMemoryTest, ImpossibleRestoredStateIsCorrupt) {
  SIESTA_ASSERT_OK(prefill(session(), kPrompt));
  std::byte* meta_bytes = regions_by_name(session())["session.meta"].host;
  SessionMeta good;
  std::memcpy(&good, meta_bytes, sizeof(good));
  EXPECT_EQ(good.length, kPrompt.size());
  EXPECT_EQ(good.checkpoints, kPrompt.size() / 16);

  SessionMeta too_long = good;
  too_long.length = config_.context + 1;
  too_long.checkpoints = too_long.length / 16;
  SessionMeta wrong_count = good;
  wrong_count.checkpoints += 1;
  SessionMeta bad_magic = good;
  bad_magic.magic ^= 1;
  SessionMeta prompt_end_past_length = good;
  prompt_end_past_length.prompt_end = good.length + 1;
  SessionMeta prompt_end_never_taken = good;  // the region holds no checkpoint at 10
  prompt_end_never_taken.prompt_end = 10;
  SessionMeta reserved_set = good;
  reserved_set.reserved = 1;
  for (const SessionMeta& bad : {too_long, wrong_count, bad_magic, prompt_end_past_length,
                                 prompt_end_never_taken, reserved_set}) {
    std::memcpy(meta_bytes, &bad, sizeof(bad));
    const Status adopted = session().adopt_restored_state();
    SIESTA_EXPECT_CODE(adopted, StatusCode::kCorrupt);
    EXPECT_THAT(adopted.message(), HasSubstr("session.meta"));
  }
  std::memcpy(meta_bytes, &good, sizeof(good));
  SIESTA_EXPECT_OK(session().adopt_restored_state());
  EXPECT_EQ(session().length(), kPrompt.size());
}

INSTANTIATE_TEST_SUITE_P(EveryKvType, SessionMemoryTest,
                         ::testing::Values(KvType::kF32, KvType::kF16, KvType::kInt8),
                         [](const auto& p) { return std::string(kv_type_name(p.param)); });

TEST(SessionFingerprint, DiffersAcrossSizesKvTypesAndContexts) {
  std::vector<ModelConfig> configs;
  for (const NamedModel& entry : model_config_table()) configs.push_back(entry.config);
  configs.push_back(tiny(KvType::kF16));
  configs.push_back(tiny(KvType::kInt8));
  configs.push_back(tiny(KvType::kF32, 512));
  std::set<snapshot::Fingerprint> seen;
  for (const ModelConfig& c : configs) {
    SIESTA_ASSERT_OK_AND_ASSIGN(auto fp,
                                session_fingerprint(c, SessionLayout::compute(c), {"host", {}}));
    EXPECT_TRUE(seen.insert(fp).second) << c.name << " " << kv_type_name(c.kv_type);
  }
}

TEST(SessionFingerprint, DiffersAcrossKernelsAndWeights) {
  const ModelConfig c = tiny(KvType::kF16);
  const SessionLayout layout = SessionLayout::compute(c);
  snapshot::HeaderDigest other_weights{};
  other_weights[31] = 1;
  std::set<snapshot::Fingerprint> seen;
  for (const FingerprintInputs& inputs :
       {FingerprintInputs{"host", {}}, FingerprintInputs{"cuda", {}},
        FingerprintInputs{"host", other_weights}}) {
    SIESTA_ASSERT_OK_AND_ASSIGN(auto fp, session_fingerprint(c, layout, inputs));
    EXPECT_TRUE(seen.insert(fp).second) << inputs.kernels;
  }
}

TEST(SessionFingerprint, EqualForEqualConfigsAndMatchesTheSession) {
  Rig a, b, other;
  SIESTA_ASSERT_OK(a.init(tiny(KvType::kF16)));
  SIESTA_ASSERT_OK(b.init(tiny(KvType::kF16)));
  SIESTA_ASSERT_OK(other.init(tiny(KvType::kF16, 128)));
  EXPECT_EQ(a.session->fingerprint(), b.session->fingerprint());
  EXPECT_NE(a.session->fingerprint(), other.session->fingerprint());
  const ModelConfig c = tiny(KvType::kF16);
  SIESTA_ASSERT_OK_AND_ASSIGN(auto fp,
                              session_fingerprint(c, SessionLayout::compute(c),
                                                  {a.kernels->name(), a.model->weights_digest()}));
  EXPECT_EQ(a.session->fingerprint(), fp);
  // Another weight seed: other weights, another fingerprint.
  ModelConfig reseeded = tiny(KvType::kF16);
  reseeded.weight_seed += 1;
  Rig d;
  SIESTA_ASSERT_OK(d.init(reseeded));
  EXPECT_NE(d.model->weights_digest(), a.model->weights_digest());
}

// The figures model_config.h documents for the named sizes at their default context.
TEST(SessionLayout, FiguresOfTheNamedSizes) {
  const uint64_t device[] = {710912, 5384704, 275845120, 4326955008};
  const uint64_t host[] = {6144, 20480, 77312, 169472};
  const auto table = model_config_table();
  for (size_t i = 0; i < table.size(); ++i) {
    const SessionLayout layout = SessionLayout::compute(table[i].config);
    EXPECT_EQ(layout.device_bytes, device[i]) << table[i].size;
    EXPECT_EQ(layout.host_bytes, host[i]) << table[i].size;
    EXPECT_EQ(layout.regions.size(), 2u + 2u * table[i].config.layers + 5u);
  }
}

TEST(Session, OutOfMemoryAtCreateReservesNothing) {
  SimBackendOptions options;
  options.granularity = 64u << 10;
  options.capacity_bytes = 640u << 10;  // the weights (512 KiB) fit, the session does not
  SIESTA_ASSERT_OK_AND_ASSIGN(auto backend, SimBackend::create(options));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto kernels, HostKernels::create(*backend));
  SIESTA_ASSERT_OK_AND_ASSIGN(auto model, Model::load(tiny(KvType::kF32), *backend, *kernels));
  const MemoryStats with_weights = backend->stats();
  HostVmm host;
  SIESTA_EXPECT_CODE(Session::create(*model, *backend, *kernels, host), StatusCode::kOutOfMemory);
  EXPECT_EQ(backend->stats().reserved_bytes, with_weights.reserved_bytes);
  EXPECT_EQ(backend->stats().committed_bytes, with_weights.committed_bytes);
  EXPECT_EQ(host.stats().reserved_bytes, 0u);
}

}  // namespace
}  // namespace siesta::engine
