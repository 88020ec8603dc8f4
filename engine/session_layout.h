// SessionLayout: where every region of a Session lives, as offsets from the start of the
// session's device reservation or host range, computed once from the ModelConfig. Addresses
// are formed at use (base + offset), so code that moves the memory (a test's relocation)
// cannot leave a stale copy of an address anywhere but in the recorded graph.
//
// Also the session's fingerprint: SHA-256 over a versioned serialisation of every
// ModelConfig field the state depends on (prefill_block is not one: the kernel contract makes a
// prompt's bits independent of its blocks), the region table, the kernels that compute the
// state with their contract's version, and the weights' digest, so a snapshot of any other
// model, weights, configuration, layout or arithmetic is refused as Foreign.
//
// Thread rule: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/snapshot/snapshot_format.h"
#include "core/snapshot/snapshot_region.h"
#include "engine/model_config.h"

namespace siesta::engine {

inline constexpr uint64_t kRegionAlignment = 256;

struct RegionSpec {
  std::string name;
  snapshot::PersistKind persist = snapshot::PersistKind::kContents;
  SnapshotRegion::Place place = SnapshotRegion::Place::kDevice;
  uint64_t offset = 0;  // from the base of the device reservation or the host range
  uint64_t size = 0;
};

// The 24 bytes of "session.meta" (host memory, native byte order: it never leaves the process
// except inside this process's snapshot, whose fingerprint pins the layout).
struct SessionMeta {
  uint64_t magic = 0;
  uint32_t length = 0;
  uint32_t checkpoints = 0;  // length / checkpoint_interval
  // The length at which "recurrent.prompt_end" was taken (the end of the last prompt fed);
  // 0: none. At most `length`.
  uint32_t prompt_end = 0;
  uint32_t reserved = 0;  // 0
};
static_assert(sizeof(SessionMeta) == 24);
inline constexpr uint64_t kSessionMetaMagic = 0x3274656d53455353ull;  // "SSESmet2"

// "recurrent.prompt_end" (host memory): the state where the last prompt fed ended, and what
// follows it, so that the session can return there without reading the prompt again. The
// header, then the recurrent state (dim floats), then the logits of the next token
// (kVocabSize floats): kPromptEndHeaderBytes + state_bytes + kVocabSize * 4 bytes.
struct PromptEndHeader {
  uint32_t length = 0;  // equals SessionMeta::prompt_end while that is not 0
  int32_t next = 0;     // the greedy choice the logits give (the device's argmax)
};
static_assert(sizeof(PromptEndHeader) == 8);
inline constexpr uint64_t kPromptEndHeaderBytes = sizeof(PromptEndHeader);

// Offsets of the scratch buffers, inside the device reservation (already include the scratch
// region's own offset). The activations hold `rows` tokens (a prefill block); the decode step
// uses their first row.
struct ScratchOffsets {
  uint32_t rows;                        // min(kMaxPrefillBlock, context)
  uint64_t x, xn, q, k, v, attn, proj;  // [rows][dim] f32
  uint64_t gate, up;                    // [rows][ffn_dim] f32
  uint64_t states;                      // [rows][dim] f32: the recurrent state after each row
  uint64_t tokens;                      // [rows] int32: the block's tokens
  uint64_t attention;                   // attention_block's scratch for `rows` queries
  uint64_t logits;                      // [kVocabSize] f32
  uint64_t params;                      // StepParams
  uint64_t next;                        // int32, the argmax
};

struct SessionLayout {
  // Regions in snapshot order: constants.rope, scratch, layer.<i>.k, layer.<i>.v (i
  // ascending, k before v), recurrent.state, then the host ones: session.meta,
  // session.tokens, recurrent.checkpoints, recurrent.prompt_end.
  std::vector<RegionSpec> regions;
  size_t rope = 0, scratch = 0, first_kv = 0, state = 0;  // indices into `regions`
  size_t meta = 0, tokens = 0, checkpoints = 0, prompt_end = 0;
  ScratchOffsets buffers{};
  uint64_t kv_row_bytes = 0;
  uint64_t state_bytes = 0;       // dim floats
  uint64_t prompt_end_bytes = 0;  // the header, the state and the logits
  uint32_t max_checkpoints = 0;   // context / checkpoint_interval
  uint64_t device_bytes = 0;      // before the backend rounds up to its granularity
  uint64_t host_bytes = 0;

  // REQUIRES: validate(config) is OK.
  static SessionLayout compute(const ModelConfig& config);

  size_t k_region(uint32_t layer) const { return first_kv + 2 * size_t{layer}; }
  size_t v_region(uint32_t layer) const { return first_kv + 2 * size_t{layer} + 1; }
  uint64_t offset(size_t region) const { return regions[region].offset; }
};

// What else a session's state depends on: the arithmetic that computed it (the kernels' name;
// compute/kernel_contract.h's version is bound with it) and the weights it was computed with.
struct FingerprintInputs {
  std::string kernels;               // Kernels::name(): "host", "cuda"
  snapshot::HeaderDigest weights{};  // Model::weights_digest()
};

// Failure: Internal when hashing fails.
Result<snapshot::Fingerprint> session_fingerprint(const ModelConfig& config,
                                                  const SessionLayout& layout,
                                                  const FingerprintInputs& inputs);

}  // namespace siesta::engine
