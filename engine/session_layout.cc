#include "engine/session_layout.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "compute/kernel_contract.h"
#include "core/snapshot/chunk_sealer.h"

namespace siesta::engine {
namespace {

constexpr uint64_t align_up(uint64_t value) {
  return (value + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

// Appends regions back to back, each aligned, within one reservation.
class Packer {
 public:
  Packer(std::vector<RegionSpec>& regions, SnapshotRegion::Place place)
      : regions_(regions), place_(place) {}
  size_t add(std::string name, snapshot::PersistKind persist, uint64_t size) {
    regions_.push_back({std::move(name), persist, place_, end_, size});
    end_ = align_up(end_ + size);
    return regions_.size() - 1;
  }
  uint64_t end() const { return end_; }

 private:
  std::vector<RegionSpec>& regions_;
  SnapshotRegion::Place place_;
  uint64_t end_ = 0;
};

// Little-endian, fixed-width fields: the fingerprint must not depend on struct padding.
class Serialiser {
 public:
  void u8(uint8_t v) { bytes_.push_back(v); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void f32(float v) { u32(std::bit_cast<uint32_t>(v)); }
  void text(std::string_view s) {
    u64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
  }
  std::span<const uint8_t> bytes() const { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace

SessionLayout SessionLayout::compute(const ModelConfig& c) {
  using snapshot::PersistKind;
  SessionLayout layout;
  layout.kv_row_bytes = siesta::kv_row_bytes(c.kv_type, c.dim);
  layout.state_bytes = uint64_t{c.dim} * sizeof(float);
  layout.max_checkpoints = c.context / c.checkpoint_interval;

  // Scratch buffers, packed inside the scratch region.
  uint64_t scratch_size = 0;
  auto take = [&](uint64_t bytes) {
    const uint64_t at = scratch_size;
    scratch_size = align_up(scratch_size + bytes);
    return at;
  };
  ScratchOffsets b{};
  b.rows = std::min(kMaxPrefillBlock, c.context);
  const uint64_t dim_bytes = uint64_t{b.rows} * c.dim * sizeof(float);
  const uint64_t ffn_bytes = uint64_t{b.rows} * c.ffn_dim * sizeof(float);
  b.x = take(dim_bytes);
  b.xn = take(dim_bytes);
  b.q = take(dim_bytes);
  b.k = take(dim_bytes);
  b.v = take(dim_bytes);
  b.attn = take(dim_bytes);
  b.proj = take(dim_bytes);
  b.gate = take(ffn_bytes);
  b.up = take(ffn_bytes);
  b.states = take(dim_bytes);
  b.tokens = take(uint64_t{b.rows} * sizeof(int32_t));
  b.attention = take(attention_scratch_bytes(b.rows, c.heads, c.head_dim(), c.context));
  b.logits = take(uint64_t{kVocabSize} * sizeof(float));
  b.params = take(sizeof(StepParams));
  b.next = take(sizeof(int32_t));

  Packer device(layout.regions, SnapshotRegion::Place::kDevice);
  // {cos, sin} for context positions and head_dim / 2 pairs.
  layout.rope = device.add("constants.rope", PersistKind::kReinit,
                           uint64_t{c.context} * c.head_dim() * sizeof(float));
  layout.scratch = device.add("scratch", PersistKind::kDiscard, scratch_size);
  layout.first_kv = layout.regions.size();
  for (uint32_t l = 0; l < c.layers; ++l) {
    device.add("layer." + std::to_string(l) + ".k", PersistKind::kContents, c.kv_cache_bytes());
    device.add("layer." + std::to_string(l) + ".v", PersistKind::kContents, c.kv_cache_bytes());
  }
  layout.state = device.add("recurrent.state", PersistKind::kContents, layout.state_bytes);
  layout.device_bytes = device.end();

  const uint64_t scratch_base = layout.regions[layout.scratch].offset;
  for (uint64_t* field : {&b.x, &b.xn, &b.q, &b.k, &b.v, &b.attn, &b.proj, &b.gate, &b.up,
                          &b.states, &b.tokens, &b.attention, &b.logits, &b.params, &b.next}) {
    *field += scratch_base;
  }
  layout.buffers = b;

  Packer host(layout.regions, SnapshotRegion::Place::kHost);
  layout.meta = host.add("session.meta", PersistKind::kContents, sizeof(SessionMeta));
  layout.tokens = host.add("session.tokens", PersistKind::kContents, c.context);
  layout.checkpoints = host.add("recurrent.checkpoints", PersistKind::kContents,
                                uint64_t{layout.max_checkpoints} * layout.state_bytes);
  layout.prompt_end_bytes =
      kPromptEndHeaderBytes + layout.state_bytes + uint64_t{kVocabSize} * sizeof(float);
  layout.prompt_end =
      host.add("recurrent.prompt_end", PersistKind::kContents, layout.prompt_end_bytes);
  layout.host_bytes = host.end();
  return layout;
}

Result<snapshot::Fingerprint> session_fingerprint(const ModelConfig& c, const SessionLayout& layout,
                                                  const FingerprintInputs& inputs) {
  Serialiser s;
  s.text("siesta.session.fingerprint.v2");
  s.text(inputs.kernels);
  s.u32(kKernelContractVersion);
  s.u64(inputs.weights.size());
  for (const uint8_t byte : inputs.weights) s.u8(byte);
  s.text(c.name);
  s.u32(c.layers);
  s.u32(c.dim);
  s.u32(c.heads);
  s.u32(c.ffn_dim);
  s.u32(c.context);
  s.u8(static_cast<uint8_t>(c.kv_type));
  s.u32(c.recurrent_after);
  s.u32(c.checkpoint_interval);
  s.u64(c.weight_seed);
  s.f32(c.rope_theta);
  s.f32(c.norm_eps);
  s.u64(layout.regions.size());
  for (const RegionSpec& r : layout.regions) {
    s.text(r.name);
    s.u64(r.size);
    s.u64(r.offset);
    s.u8(static_cast<uint8_t>(r.persist));
    s.u8(static_cast<uint8_t>(r.place));
  }
  SIESTA_ASSIGN_OR_RETURN(snapshot::HeaderDigest digest, sha256(s.bytes()));
  snapshot::Fingerprint fingerprint{};
  static_assert(sizeof(fingerprint) == sizeof(digest));
  std::memcpy(fingerprint.data(), digest.data(), fingerprint.size());
  return fingerprint;
}

}  // namespace siesta::engine
