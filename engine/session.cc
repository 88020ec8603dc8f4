#include "engine/session.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/memory/device_copy.h"
#include "engine/decode_graph.h"
#include "engine/prefill_step.h"
#include "engine/session_layout.h"

namespace siesta::engine {

struct Session::Layout : SessionLayout {
  explicit Layout(SessionLayout layout) : SessionLayout(std::move(layout)) {}
};

namespace {

std::string hex_address(DeviceAddress address) {
  char text[32];
  (void)std::snprintf(text, sizeof(text), "0x%" PRIx64, address);
  return text;
}

// Host memory is the one part of "committed" the session can see; a call after a release
// would fault on it, so it is refused instead.
Status require_committed(const HostRange& host, std::string_view what) {
  if (host.committed()) return Status::Ok();
  return FailedPrecondition(std::string(what) + ": the session's memory is released");
}

std::byte* host_region(const HostRange& host, const SessionLayout& layout, size_t region) {
  return host.data() + layout.offset(region);
}

void write_meta(const HostRange& host, const SessionLayout& layout, uint32_t length,
                uint32_t interval, uint32_t prompt_end) {
  const SessionMeta meta{kSessionMetaMagic, length, length / interval, prompt_end, 0};
  std::memcpy(host_region(host, layout, layout.meta), &meta, sizeof(meta));
}

Status fill_rope(Kernels& kernels, const ModelConfig& c, DeviceAddress table) {
  return kernels.rope_table(table, c.context, c.head_dim(), c.rope_theta);
}

// Through the kernels' stream, so it is ordered with the replays around it.
Status zero_device(Kernels& kernels, DeviceAddress address, uint64_t bytes) {
  const std::vector<std::byte> zeros(bytes);
  return kernels.upload(zeros, address);
}

}  // namespace

Session::Session(const Model& model, MemoryBackend& backend, Kernels& kernels)
    : model_(model), backend_(backend), kernels_(kernels) {}

Session::~Session() {
  // No kernel may still run on this memory when the reservations go away.
  kernels_.synchronize().ignore();
}

Result<std::unique_ptr<Session>> Session::create(const Model& model, MemoryBackend& backend,
                                                 Kernels& kernels, HostVmm& host) {
  const ModelConfig& c = model.config();
  SIESTA_RETURN_IF_ERROR(validate(c));
  std::unique_ptr<Session> s(new Session(model, backend, kernels));
  s->layout_ = std::make_unique<Layout>(SessionLayout::compute(c));
  const Layout& layout = *s->layout_;
  SIESTA_ASSIGN_OR_RETURN(s->fingerprint_,
                          session_fingerprint(c, layout, {kernels.name(), model.weights_digest()}));

  SIESTA_ASSIGN_OR_RETURN(s->device_, ReservedRange::reserve(backend, layout.device_bytes));
  if (Status st = backend.commit(s->device_.range()); !st.ok()) {
    return st.with_context("committing " + std::to_string(s->device_.range().size) +
                           " bytes of session device memory");
  }
  SIESTA_ASSIGN_OR_RETURN(HostRange host_range, host.reserve(layout.host_bytes));
  s->host_ = std::make_unique<HostRange>(std::move(host_range));
  SIESTA_RETURN_IF_ERROR(s->host_->commit());

  const DeviceAddress base = s->device_.range().base;
  // Fresh device memory is not zero on a GPU; the recurrent state must start at zero.
  SIESTA_RETURN_IF_ERROR(
      zero_device(kernels, base + layout.offset(layout.state), layout.state_bytes));
  SIESTA_RETURN_IF_ERROR(fill_rope(kernels, c, base + layout.offset(layout.rope)));
  write_meta(*s->host_, layout, 0, c.checkpoint_interval, 0);
  SIESTA_ASSIGN_OR_RETURN(s->decode_graph_, record_decode_graph(kernels, model, layout, base));
  s->graph_base_ = base;
  SIESTA_RETURN_IF_ERROR(kernels.synchronize());
  return s;
}

const ModelConfig& Session::config() const { return model_.config(); }

std::span<const Token> Session::history() const {
  const auto* tokens =
      reinterpret_cast<const Token*>(host_region(*host_, *layout_, layout_->tokens));
  return {tokens, length_};
}

Result<uint32_t> Session::reuse_prefix(std::span<const Token> prompt) {
  const ModelConfig& c = config();
  if (prompt.empty()) return InvalidArgument("empty prompt");
  if (prompt.size() > c.context) {
    return InvalidArgument("prompt of " + std::to_string(prompt.size()) +
                           " tokens exceeds the context of " + std::to_string(c.context));
  }
  SIESTA_RETURN_IF_ERROR(require_committed(*host_, "reuse_prefix"));
  const std::span<const Token> cached = history();
  const size_t limit = std::min(cached.size(), prompt.size());
  size_t common = 0;
  while (common < limit && cached[common] == prompt[common]) ++common;
  // The prompt extends the whole history: nothing to undo, at least one token to feed.
  if (common == length_ && length_ < prompt.size()) return length_;

  // The recurrent state cannot be truncated: go back to the newest point at or before the
  // divergence where it is known. An interval checkpoint must leave at least one prompt token
  // to feed (its logits are what the caller needs); the prompt-end checkpoint brings its
  // logits back, so it may cover the whole prompt. KV rows past the point are overwritten by
  // the next feeds.
  const uint32_t interval = c.checkpoint_interval;
  const auto feedable = static_cast<uint32_t>(std::min(common, prompt.size() - 1));
  const uint32_t kept = feedable / interval;
  const bool to_prompt_end =
      prompt_end_ != 0 && prompt_end_ <= common && prompt_end_ > kept * interval;
  next_ready_ = false;
  const DeviceAddress base = device_.range().base;
  const DeviceAddress state = base + layout_->offset(layout_->state);
  if (to_prompt_end) {
    const std::byte* saved = host_region(*host_, *layout_, layout_->prompt_end);
    PromptEndHeader header;
    std::memcpy(&header, saved, sizeof(header));
    SIESTA_RETURN_IF_ERROR(
        kernels_.upload({saved + kPromptEndHeaderBytes, layout_->state_bytes}, state));
    SIESTA_RETURN_IF_ERROR(kernels_.upload({saved + kPromptEndHeaderBytes + layout_->state_bytes,
                                            uint64_t{kVocabSize} * sizeof(float)},
                                           base + layout_->buffers.logits));
    SIESTA_RETURN_IF_ERROR(
        kernels_.upload(std::as_bytes(std::span(&header.next, 1)), base + layout_->buffers.next));
    length_ = prompt_end_;
  } else {
    if (kept == 0) {
      SIESTA_RETURN_IF_ERROR(zero_device(kernels_, state, layout_->state_bytes));
    } else {
      const std::byte* checkpoint = host_region(*host_, *layout_, layout_->checkpoints) +
                                    uint64_t{kept - 1} * layout_->state_bytes;
      SIESTA_RETURN_IF_ERROR(kernels_.upload({checkpoint, layout_->state_bytes}, state));
    }
    length_ = kept * interval;
    // Tokens before it may now be replaced: the prompt-end checkpoint no longer describes them.
    if (prompt_end_ > length_) prompt_end_ = 0;
  }
  unchanged_ = std::min(unchanged_, length_);
  write_meta(*host_, *layout_, length_, interval, prompt_end_);
  next_ready_ = to_prompt_end;  // the logits that follow the prompt's end are in scratch again
  return length_;
}

Status Session::checkpoint_prompt_end() {
  if (!next_ready_) {
    return FailedPrecondition("checkpoint_prompt_end: no token fed since the last reset");
  }
  SIESTA_RETURN_IF_ERROR(require_committed(*host_, "checkpoint_prompt_end"));
  if (prompt_end_ == length_) return Status::Ok();
  const ModelConfig& c = config();
  const DeviceAddress base = device_.range().base;
  std::byte* saved = host_region(*host_, *layout_, layout_->prompt_end);
  // Dropped first: a failed download leaves no checkpoint half written.
  prompt_end_ = 0;
  write_meta(*host_, *layout_, length_, c.checkpoint_interval, 0);
  PromptEndHeader header{length_, 0};
  SIESTA_RETURN_IF_ERROR(kernels_.download(base + layout_->buffers.next,
                                           std::as_writable_bytes(std::span(&header.next, 1))));
  SIESTA_RETURN_IF_ERROR(kernels_.download(base + layout_->offset(layout_->state),
                                           {saved + kPromptEndHeaderBytes, layout_->state_bytes}));
  SIESTA_RETURN_IF_ERROR(kernels_.download(base + layout_->buffers.logits,
                                           {saved + kPromptEndHeaderBytes + layout_->state_bytes,
                                            uint64_t{kVocabSize} * sizeof(float)}));
  std::memcpy(saved, &header, sizeof(header));
  prompt_end_ = length_;
  write_meta(*host_, *layout_, length_, c.checkpoint_interval, prompt_end_);
  return Status::Ok();
}

Status Session::check_can_feed(std::string_view what) const {
  const ModelConfig& c = config();
  if (length_ >= c.context) {
    return InvalidArgument("the context of " + std::to_string(c.context) + " tokens is full");
  }
  SIESTA_RETURN_IF_ERROR(require_committed(*host_, what));
  const DeviceAddress base = device_.range().base;
  if (base != graph_base_) {
    return FailedPrecondition("session device memory is at " + hex_address(base) +
                              " but the decode graph was recorded at " + hex_address(graph_base_));
  }
  return Status::Ok();
}

Status Session::feed(Token token) {
  const ModelConfig& c = config();
  SIESTA_RETURN_IF_ERROR(check_can_feed("feed"));
  const DeviceAddress base = device_.range().base;
  next_ready_ = false;  // until this step is done
  const StepParams params{token, static_cast<int32_t>(length_)};
  SIESTA_RETURN_IF_ERROR(
      kernels_.upload(std::as_bytes(std::span(&params, 1)), base + layout_->buffers.params));
  SIESTA_RETURN_IF_ERROR(kernels_.replay(*decode_graph_));
  host_region(*host_, *layout_, layout_->tokens)[length_] = static_cast<std::byte>(token);
  ++length_;
  if (length_ % c.checkpoint_interval == 0) {
    const uint32_t index = length_ / c.checkpoint_interval - 1;
    std::byte* checkpoint = host_region(*host_, *layout_, layout_->checkpoints) +
                            uint64_t{index} * layout_->state_bytes;
    SIESTA_RETURN_IF_ERROR(kernels_.download(base + layout_->offset(layout_->state),
                                             {checkpoint, layout_->state_bytes}));
  }
  write_meta(*host_, *layout_, length_, c.checkpoint_interval, prompt_end_);
  next_ready_ = true;
  return Status::Ok();
}

uint32_t Session::prefill_block() const {
  const uint32_t configured = config().prefill_block;
  const uint32_t block = configured != 0 ? configured : kernels_.preferred_prefill_block();
  return std::clamp(block, 1u, kMaxPrefillBlock);
}

Result<uint32_t> Session::feed_block(std::span<const Token> tokens) {
  const ModelConfig& c = config();
  if (tokens.empty()) return InvalidArgument("feed_block: no tokens");
  SIESTA_RETURN_IF_ERROR(check_can_feed("feed_block"));
  const uint32_t count = static_cast<uint32_t>(std::min<uint64_t>(
      {tokens.size(), prefill_block(), layout_->buffers.rows, uint64_t{c.context} - length_}));
  if (count == 1) {
    SIESTA_RETURN_IF_ERROR(feed(tokens[0]));
    return 1u;
  }
  const DeviceAddress base = device_.range().base;
  const uint32_t position = length_;
  next_ready_ = false;  // until this step is done
  std::vector<int32_t> ids(tokens.begin(), tokens.begin() + count);
  SIESTA_RETURN_IF_ERROR(
      kernels_.upload(std::as_bytes(std::span(ids)), base + layout_->buffers.tokens));
  SIESTA_RETURN_IF_ERROR(enqueue_prefill_step(kernels_, model_, *layout_, base, position, count));
  std::byte* history = host_region(*host_, *layout_, layout_->tokens);
  for (uint32_t i = 0; i < count; ++i) history[position + i] = static_cast<std::byte>(tokens[i]);
  length_ = position + count;
  // Every checkpoint the block passed: the state after its row, kept in the scratch `states`.
  const uint32_t interval = c.checkpoint_interval;
  for (uint32_t at = (position / interval + 1) * interval; at <= length_; at += interval) {
    std::byte* checkpoint = host_region(*host_, *layout_, layout_->checkpoints) +
                            uint64_t{at / interval - 1} * layout_->state_bytes;
    const DeviceAddress row =
        base + layout_->buffers.states + uint64_t{at - 1 - position} * layout_->state_bytes;
    SIESTA_RETURN_IF_ERROR(kernels_.download(row, {checkpoint, layout_->state_bytes}));
  }
  write_meta(*host_, *layout_, length_, interval, prompt_end_);
  next_ready_ = true;
  return count;
}

Result<Token> Session::greedy_next() {
  if (!next_ready_) return FailedPrecondition("greedy_next: no token fed since the last reset");
  SIESTA_RETURN_IF_ERROR(require_committed(*host_, "greedy_next"));
  int32_t next = -1;
  SIESTA_RETURN_IF_ERROR(kernels_.download(device_.range().base + layout_->buffers.next,
                                           std::as_writable_bytes(std::span(&next, 1))));
  if (next < static_cast<int32_t>(kFirstPrintable) || next > static_cast<int32_t>(kLastPrintable)) {
    return Internal("argmax returned " + std::to_string(next) + ", not a printable token");
  }
  return static_cast<Token>(next);
}

Result<std::vector<float>> Session::next_logits() {
  if (!next_ready_) return FailedPrecondition("next_logits: no token fed since the last reset");
  SIESTA_RETURN_IF_ERROR(require_committed(*host_, "next_logits"));
  std::vector<float> logits(kVocabSize);
  SIESTA_RETURN_IF_ERROR(kernels_.download(device_.range().base + layout_->buffers.logits,
                                           std::as_writable_bytes(std::span(logits))));
  return logits;
}

std::vector<SnapshotRegion> Session::snapshot_regions() const { return snapshot_regions_after(0); }

std::vector<SnapshotRegion> Session::snapshot_regions_after(uint64_t unchanged_tokens) const {
  const Layout& l = *layout_;
  const uint32_t interval = config().checkpoint_interval;
  const uint64_t unchanged = std::min<uint64_t>(unchanged_tokens, length_);
  std::vector<SnapshotRegion> out;
  out.reserve(l.regions.size());
  for (size_t i = 0; i < l.regions.size(); ++i) {
    const RegionSpec& spec = l.regions[i];
    SnapshotRegion region;
    region.layout.name = spec.name;
    region.layout.persist = spec.persist;
    region.layout.size = spec.size;
    region.place = spec.place;
    if (spec.place == SnapshotRegion::Place::kDevice) {
      region.device = device_.range().base + spec.offset;
    } else {
      region.host = host_->data() + spec.offset;
    }
    // [from, used): kReinit and kDiscard regions save nothing; rows, tokens and checkpoints
    // grow with the history and are written once per position, so those below `unchanged`
    // are as they were.
    uint64_t from = 0;
    uint64_t used = 0;
    if (i >= l.first_kv && i < l.state) {
      from = unchanged * l.kv_row_bytes;
      used = uint64_t{length_} * l.kv_row_bytes;
    } else if (i == l.state || i == l.meta) {
      used = spec.size;  // rewritten whole (and a fresh commit is not zero): always saved
    } else if (i == l.tokens) {
      from = unchanged;
      used = length_;
    } else if (i == l.checkpoints) {
      from = unchanged / interval * l.state_bytes;
      used = uint64_t{length_ / interval} * l.state_bytes;
    } else if (i == l.prompt_end) {
      used = prompt_end_ != 0 ? spec.size : 0;  // rewritten whole when taken: saved whole
    }
    if (used > from) region.layout.extents.push_back({from, used - from});
    out.push_back(std::move(region));
  }
  return out;
}

uint64_t Session::take_unchanged_tokens() { return std::exchange(unchanged_, length_); }

void Session::mark_device_work() {
  Result<std::unique_ptr<KernelFence>> made = kernels_.fence();
  fence_ = made.ok() ? std::move(made).value() : nullptr;
}

Result<bool> Session::wait_for_marked_work() {
  if (fence_ == nullptr) return false;
  SIESTA_RETURN_IF_ERROR(fence_->wait());
  return true;
}

std::vector<DeviceRange> Session::device_memory() const { return {device_.range()}; }

std::vector<HostRange*> Session::host_memory() { return {host_.get()}; }

Status Session::adopt_restored_state() {
  SIESTA_RETURN_IF_ERROR(require_committed(*host_, "adopt_restored_state"));
  const ModelConfig& c = config();
  next_ready_ = false;  // scratch is not saved
  SessionMeta meta;
  std::memcpy(&meta, host_region(*host_, *layout_, layout_->meta), sizeof(meta));
  if (meta.magic != kSessionMetaMagic) {
    return Corrupt("session.meta: wrong magic " + hex_address(meta.magic));
  }
  if (meta.length > c.context) {
    return Corrupt("session.meta: length " + std::to_string(meta.length) +
                   " exceeds the context of " + std::to_string(c.context));
  }
  if (meta.checkpoints != meta.length / c.checkpoint_interval) {
    return Corrupt("session.meta: " + std::to_string(meta.checkpoints) +
                   " checkpoints for a length of " + std::to_string(meta.length) +
                   " at an interval of " + std::to_string(c.checkpoint_interval));
  }
  if (meta.prompt_end > meta.length || meta.reserved != 0) {
    return Corrupt("session.meta: a prompt-end checkpoint at " + std::to_string(meta.prompt_end) +
                   " for a length of " + std::to_string(meta.length) + " (reserved " +
                   std::to_string(meta.reserved) + ")");
  }
  if (meta.prompt_end != 0) {
    PromptEndHeader header;
    std::memcpy(&header, host_region(*host_, *layout_, layout_->prompt_end), sizeof(header));
    if (header.length != meta.prompt_end || header.next < static_cast<int32_t>(kFirstPrintable) ||
        header.next > static_cast<int32_t>(kLastPrintable)) {
      return Corrupt("recurrent.prompt_end: taken at " + std::to_string(header.length) +
                     " with next token " + std::to_string(header.next) +
                     ", but session.meta says " + std::to_string(meta.prompt_end));
    }
  }
  SIESTA_RETURN_IF_ERROR(
      fill_rope(kernels_, c, device_.range().base + layout_->offset(layout_->rope)));
  SIESTA_RETURN_IF_ERROR(kernels_.synchronize());
  length_ = meta.length;
  prompt_end_ = meta.prompt_end;
  // Replaced: nothing of what was there before is known unchanged (an import must not be
  // saved as a delta over the snapshot of the conversation it replaced). The Offloader starts
  // a new count after restoring its own snapshot.
  unchanged_ = 0;
  return Status::Ok();
}

Status Session::discard_history() {
  SIESTA_RETURN_IF_ERROR(require_committed(*host_, "discard_history"));
  // backend.zero() runs on the backend's copy stream (on CUDA not the kernels' stream): the
  // kernels must be done with this memory first. An error of that abandoned work is not this
  // call's failure; the history it belonged to is being thrown away.
  kernels_.synchronize().ignore();
  next_ready_ = false;
  const DeviceAddress base = device_.range().base;
  for (const RegionSpec& spec : layout_->regions) {
    if (spec.persist != snapshot::PersistKind::kContents) continue;
    if (spec.place == SnapshotRegion::Place::kDevice) {
      SIESTA_RETURN_IF_ERROR(backend_.zero({base + spec.offset, spec.size}));
    } else {
      std::memset(host_->data() + spec.offset, 0, spec.size);
    }
  }
  SIESTA_RETURN_IF_ERROR(backend_.synchronize());
  length_ = 0;
  unchanged_ = 0;
  prompt_end_ = 0;
  write_meta(*host_, *layout_, 0, config().checkpoint_interval, 0);
  SIESTA_RETURN_IF_ERROR(fill_rope(kernels_, config(), base + layout_->offset(layout_->rope)));
  return kernels_.synchronize();
}

Status Session::relocate_device_memory_for_testing() {
  SIESTA_RETURN_IF_ERROR(kernels_.synchronize());
  const DeviceRange old = device_.range();
  std::vector<std::byte> contents(old.size);
  SIESTA_RETURN_IF_ERROR(copy_device_to_host(backend_, old.base, contents));
  // Reserved before the old range goes, so the new address cannot equal the old one.
  SIESTA_ASSIGN_OR_RETURN(ReservedRange moved, ReservedRange::reserve(backend_, old.size));
  SIESTA_RETURN_IF_ERROR(backend_.commit(moved.range()));
  SIESTA_RETURN_IF_ERROR(copy_host_to_device(backend_, contents, moved.range().base));
  device_ = std::move(moved);
  return Status::Ok();
}

}  // namespace siesta::engine
