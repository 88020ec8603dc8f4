#include "engine/generation.h"

#include <algorithm>
#include <span>
#include <string>
#include <utility>

#include "engine/tokenizer.h"

namespace siesta::engine {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

Status validate_request(const GenerateRequest& request, const ModelConfig& config) {
  if (request.prompt.empty()) return InvalidArgument("the prompt is empty");
  if (request.max_tokens == 0) return InvalidArgument("max_tokens must be at least 1");
  // One token per byte; in 64 bits so that no max_tokens can overflow the sum.
  const uint64_t prompt_tokens = request.prompt.size();
  if (prompt_tokens + request.max_tokens > config.context) {
    return InvalidArgument("this model's context is " + std::to_string(config.context) +
                           " tokens; the prompt has " + std::to_string(prompt_tokens) +
                           " and max_tokens asks for " + std::to_string(request.max_tokens));
  }
  if (request.stop.size() > kMaxStopStrings) {
    return InvalidArgument("at most " + std::to_string(kMaxStopStrings) +
                           " stop strings are accepted, got " +
                           std::to_string(request.stop.size()));
  }
  for (size_t i = 0; i < request.stop.size(); ++i) {
    const std::string& s = request.stop[i];
    if (s.empty() || s.size() > kMaxStopBytes) {
      return InvalidArgument("stop string " + std::to_string(i) + " has " +
                             std::to_string(s.size()) + " bytes; it must have 1 to " +
                             std::to_string(kMaxStopBytes));
    }
    if (!is_valid_utf8(s)) {
      return InvalidArgument("stop string " + std::to_string(i) + " is not valid UTF-8");
    }
  }
  return validate_temperature(request.temperature);
}

Status discard_history_after(Session& session, Status error) {
  Status discarded = session.discard_history();
  if (discarded.ok()) return error;
  return Status(error.code(), error.message() + "; discarding the history then failed too: " +
                                  discarded.to_string());
}

Generation::Generation(const GenerateRequest& request, Session& session, Kernels& kernels,
                       const ModelConfig& config, Admission admission,
                       std::function<void()> on_progress)
    : request_(request),
      session_(session),
      kernels_(kernels),
      config_(config),
      on_progress_(std::move(on_progress)),
      matcher_(request.stop) {
  result_.admission = admission;
}

bool Generation::step() {
  switch (phase_) {
    case Phase::kStart: return start();
    case Phase::kPrefill: return prefill_block();
    case Phase::kDecode: return decode_token();
    case Phase::kEnded: break;
  }
  return true;
}

Result<GenerateResult> Generation::take_result() {
  if (!outcome_) return Internal("the generation has not ended");
  Result<GenerateResult> out = std::move(*outcome_);
  outcome_.reset();
  return out;
}

bool Generation::end(Result<GenerateResult> outcome) {
  phase_ = Phase::kEnded;
  outcome_.emplace(std::move(outcome));
  return true;
}

bool Generation::start() {
  Status valid = validate_request(request_, config_);
  if (!valid.ok()) return end(valid);
  if (request_.temperature > 0) {
    Result<Sampler> made = Sampler::create(request_.temperature, request_.seed);
    if (!made.ok()) return end(made.status());
    sampler_.emplace(*made);
  }
  prompt_ = encode(request_.prompt);
  result_.prompt_tokens = static_cast<uint32_t>(prompt_.size());
  result_.finish = FinishReason::kCancelled;
  if (cancelled()) return end(result_);  // before anything: the session is untouched

  Result<uint32_t> reused = session_.reuse_prefix(prompt_);
  if (!reused.ok()) {
    // InvalidArgument leaves the session unchanged (and validation should have caught it).
    if (reused.status().code() == StatusCode::kInvalidArgument) return end(reused.status());
    Status failed = discard_history_after(session_, reused.status());
    on_progress_();
    return end(failed);
  }
  result_.cached_tokens = *reused;
  fed_ = *reused;
  on_progress_();
  pacer_.emplace(kernels_, session_.prefill_block(), SystemClock::instance());
  phase_ = Phase::kPrefill;
  return prefill_block();  // the first block in the same step: a step always moves on
}

bool Generation::prefill_block() {
  // The history stays a prefix of the prompt, so a cancelled request's work is reused by the
  // next prompt that starts the same way. Checked before every prefill block.
  if (cancelled()) return end(result_);
  if (fed_ == prompt_.size()) {
    phase_ = Phase::kDecode;
    return decode_token();
  }
  const size_t length = std::min<size_t>(pacer_->next_block(), prompt_.size() - fed_);
  Result<uint32_t> fed = session_.feed_block(std::span(prompt_).subspan(fed_, length));
  if (!fed.ok()) {
    Status failed = discard_history_after(session_, fed.status());
    on_progress_();
    return end(failed);
  }
  fed_ += *fed;
  on_progress_();
  Status paced = pacer_->after_feed(*fed);
  if (!paced.ok()) {
    Status failed = discard_history_after(session_, paced);
    on_progress_();
    return end(failed);
  }
  if (fed_ == prompt_.size()) phase_ = Phase::kDecode;
  return false;
}

void Generation::emit(const std::string& piece) {
  if (piece.empty()) return;
  result_.text += piece;
  if (request_.on_text) request_.on_text(piece);
}

bool Generation::decode_token() {
  if (result_.completion_tokens == 0 && cancelled()) return end(result_);
  Result<Token> next = Internal("no token");
  if (sampler_) {
    Result<std::vector<float>> logits = session_.next_logits();
    if (!logits.ok()) {
      Status failed = discard_history_after(session_, logits.status());
      on_progress_();
      return end(failed);
    }
    next = sampler_->sample(*logits);
  } else {
    next = session_.greedy_next();
  }
  if (!next.ok()) {
    Status failed = discard_history_after(session_, next.status());
    on_progress_();
    return end(failed);
  }
  ++result_.completion_tokens;
  emit(matcher_.push(static_cast<char>(*next)));
  if (matcher_.finished()) {
    result_.finish = FinishReason::kStop;
    return end(result_);
  }
  if (result_.completion_tokens == request_.max_tokens) {
    result_.finish = FinishReason::kLength;
    emit(matcher_.flush());
    return end(result_);
  }
  if (cancelled()) {  // result_.finish is kCancelled
    emit(matcher_.flush());
    return end(result_);
  }
  // The last token chosen is not fed: its KV is computed when a later prompt contains it.
  Status fed = session_.feed(*next);
  if (!fed.ok()) {
    Status failed = discard_history_after(session_, fed);
    on_progress_();
    return end(failed);
  }
  on_progress_();
  return false;
}

}  // namespace siesta::engine
