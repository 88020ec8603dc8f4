// Session: one conversation's memory and the computation that fills it. The offload moves
// exactly this state (it implements OffloadTarget), so a wrong byte after a restore changes
// the generated text.
//
// Memory (fixed for the session's life; addresses never change):
//   device, one reservation committed whole (device_memory() returns it), regions 256-byte
//   aligned inside it, in this order:
//     "constants.rope"      kReinit   the rotary table, recomputed after any restore or discard
//     "scratch"             kDiscard  activations, StepParams, logits, the sampled token
//     "layer.<i>.k"/".v"    kContents one KV row per position; used extent: rows [0, length)
//     "recurrent.state"     kContents dim floats; always saved (a fresh commit is not zero)
//   host, one HostVmm range (host_memory() returns it), committed whole:
//     "session.meta"        kContents magic, length, checkpoint count, prompt-end length
//                           (24 bytes, always saved)
//     "session.tokens"      kContents the history, one byte per token; used: [0, length)
//     "recurrent.checkpoints" kContents the recurrent state after every checkpoint_interval
//                           tokens; used: the checkpoints taken so far
//     "recurrent.prompt_end" kContents the recurrent state where the last prompt fed ended,
//                           with the logits and greedy choice that follow it
//                           (checkpoint_prompt_end()); used: all of it when taken, else none
//
// Computation: the decode step (embed, every block, final norm, logits, greedy argmax over
// the printable tokens) is recorded once as a KernelGraph when the session is created and
// replayed for every generated token (feed()). A prompt is read in blocks of up to
// ModelConfig::prefill_block tokens (feed_block(): engine/prefill_step.h, matrix-matrix work
// over the block), whose every row has the bits the decode step gives that token
// (compute/kernel_contract.h): a prompt read all at once, token by token, after a cached
// prefix or after a fallback leaves the same KV rows, recurrent state, checkpoints and next
// token. Before every step the session checks that its memory is still where the graph was
// recorded; a graph bound to released memory would read garbage on a GPU (and fault on the
// simulator).
//
// Invariants between calls: length <= context; checkpoint count == length /
// checkpoint_interval; checkpoint c holds the recurrent state after (c+1) *
// checkpoint_interval tokens; prompt_end() <= length, and when it is not 0 the prompt-end
// checkpoint holds the recurrent state, the next logits and the greedy choice after the
// history's first prompt_end() tokens; after feed(), the logits of the token following the
// history are in scratch (until a restore, a discard or a rollback: see greedy_next()).
//
// Thread rule: one thread at a time (the engine thread). Every method but history_tokens(),
// fingerprint(), device_memory() and host_memory() REQUIRES the memory committed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend.h"
#include "core/offload/offload_target.h"
#include "engine/model.h"

namespace siesta::engine {

using Token = uint8_t;

class Session final : public OffloadTarget {
 public:
  // Reserves and commits the session's device and host memory, computes the constants,
  // records the decode graph; the history is empty.
  // Failure: OutOfMemory (device or host), DeviceError / the kernels' errors; nothing stays
  // reserved. `model`, `backend`, `kernels` and `host` must outlive the session, and `kernels`
  // must compute on `backend`'s device.
  static Result<std::unique_ptr<Session>> create(const Model& model, MemoryBackend& backend,
                                                 Kernels& kernels, HostVmm& host);
  ~Session() override;

  const ModelConfig& config() const;
  uint32_t length() const { return length_; }
  // The tokens whose KV is computed, oldest first (length() bytes of host memory).
  std::span<const Token> history() const;

  // Prepares the session for `prompt`: keeps the longest prefix of the history that `prompt`
  // extends. When `prompt` extends the whole history (and is longer) nothing changes.
  // Otherwise the session rolls back to the newest point at or before the divergence where
  // the recurrent state is known (KV rows beyond it are simply overwritten later; the state is
  // copied back from the host, or zeroed): an interval checkpoint that leaves at least one
  // prompt token to feed (its logits are needed), or the prompt-end checkpoint
  // (checkpoint_prompt_end()) when the history up to it is a prefix of `prompt` -- which
  // brings the next logits back too, so it may cover the whole prompt (the same prompt asked
  // again: a regenerate). The choice depends only on the history, the prompt and the
  // checkpoints (never on what scratch holds), so a restored session chooses as the one that
  // was never offloaded. Rolling back before the prompt-end checkpoint drops it.
  // Returns the tokens reused (the new length()); prompt[result..] remain to be fed. When
  // the result is prompt.size() nothing remains, and the next token's logits are in scratch
  // (greedy_next(), next_logits()).
  // Failure: InvalidArgument for an empty prompt or one longer than the context (session
  // unchanged); the kernels' errors.
  Result<uint32_t> reuse_prefix(std::span<const Token> prompt);

  // Keeps a checkpoint where the history ends now: the recurrent state, the next token's
  // logits and its greedy choice, copied into the host region "recurrent.prompt_end" (the one
  // kept before is replaced; nothing is done when it is already at this length). Generation
  // calls it when a prompt is fully fed, so that asking the same prompt again, or a prompt
  // that edits what followed it, reuses the whole prompt (reuse_prefix()).
  // Cost: waits for the device (the prefill's end, which the first token waits for anyway)
  // and downloads dim + kVocabSize floats; saves that many bytes more per snapshot.
  // REQUIRES: the logits that follow the history are in scratch (a feed since the last
  // restore, discard or rollback: else FailedPrecondition, nothing changed).
  // Failure: the kernels' errors (the checkpoint is dropped; discard_history() as for feed()).
  Status checkpoint_prompt_end();
  // The length where the prompt-end checkpoint was taken; 0 when there is none.
  uint32_t prompt_end() const { return prompt_end_; }

  // Feeds one token at position length(): replays the decode graph, appends the token to the
  // history, takes a host checkpoint when the new length is a multiple of the interval.
  // Failure: InvalidArgument when the context is full (session unchanged); FailedPrecondition
  // when the memory is not where the graph was recorded; the kernels' errors (the session's
  // state is then unspecified: discard_history()).
  Status feed(Token token);

  // The prefill block length feed_block() uses: ModelConfig::prefill_block, or where that is 0
  // the kernels' preferred_prefill_block() (at most kMaxPrefillBlock).
  uint32_t prefill_block() const;

  // Feeds the first min(tokens.size(), prefill_block(), room left in the context) tokens of
  // `tokens` as one prefill block at position length(); returns how many it fed (at least 1).
  // Checkpoints are taken at the same multiples of the interval as feed() takes them (the
  // block's recurrent states are all kept, so a block may span a checkpoint). A block of one
  // token (prefill_block 1, or one token given) is feed(), the decode graph.
  // Failure: as feed() (InvalidArgument also for an empty span).
  Result<uint32_t> feed_block(std::span<const Token> tokens);

  // The greedy choice for the next token (argmax over the printable tokens), computed by the
  // last feed(). REQUIRES: a feed() since the session was created, restored
  // (adopt_restored_state), discarded or rolled back by reuse_prefix(): scratch is kDiscard,
  // so a restore does not bring the last logits back (else FailedPrecondition).
  Result<Token> greedy_next();
  // The logits of the next token (kVocabSize floats), from the last feed().
  // REQUIRES: as greedy_next() (else FailedPrecondition).
  Result<std::vector<float>> next_logits();

  // ---- OffloadTarget ----
  std::vector<SnapshotRegion> snapshot_regions() const override;
  std::vector<SnapshotRegion> snapshot_regions_after(uint64_t unchanged_tokens) const override;
  uint64_t take_unchanged_tokens() override;
  void mark_device_work() override;
  Result<bool> wait_for_marked_work() override;
  std::vector<DeviceRange> device_memory() const override;
  std::vector<HostRange*> host_memory() override;
  snapshot::Fingerprint fingerprint() const override { return fingerprint_; }
  uint64_t history_tokens() const override { return length_; }
  Status adopt_restored_state() override;
  Status discard_history() override;

  // Tests only: moves the device memory to a new reservation, contents copied, as a broken
  // restore that mapped memory somewhere else would. The decode graph stays bound to the old
  // addresses, so the next feed() must fail with FailedPrecondition.
  Status relocate_device_memory_for_testing();

 private:
  struct Layout;
  Session(const Model& model, MemoryBackend& backend, Kernels& kernels);
  // The checks feed() and feed_block() share: room in the context, committed memory, memory
  // where the decode graph was recorded.
  Status check_can_feed(std::string_view what) const;

  const Model& model_;
  MemoryBackend& backend_;
  Kernels& kernels_;
  std::unique_ptr<Layout> layout_;  // region offsets and sizes, fixed at create()
  ReservedRange device_;
  std::unique_ptr<HostRange> host_;
  std::unique_ptr<KernelGraph> decode_graph_;
  DeviceAddress graph_base_ = 0;  // device_.range().base when the graph was recorded
  snapshot::Fingerprint fingerprint_{};
  uint32_t length_ = 0;      // mirrors session.meta, readable while the memory is released
  uint32_t prompt_end_ = 0;  // mirrors session.meta's prompt_end
  // The lowest length_ since take_unchanged_tokens() last ran: rows, tokens and checkpoints
  // below it have not been written since (reuse_prefix() lowers it, discard_history() and
  // adopt_restored_state() zero it).
  uint32_t unchanged_ = 0;
  // The kernels' fence at the end of the last command (mark_device_work()); null before the
  // first, or when none could be made (a save then synchronizes the device).
  std::unique_ptr<KernelFence> fence_;
  bool next_ready_ = false;  // scratch holds the logits that follow the current history
};

}  // namespace siesta::engine
