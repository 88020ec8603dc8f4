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
  // One token per byte; in 64 bits so that no max_tokens can overflow the sum.
  const uint64_t prompt_tokens = request.prompt.size();
  if (request.max_tokens == 0 && prompt_tokens + 1 > config.context) {
    return InvalidArgument("this model's context is " + std::to_string(config.context) +
                           " tokens; the prompt has " + std::to_string(prompt_tokens) +
                           ", which leaves no room for a generated token");
  }
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
  SIESTA_RETURN_IF_ERROR(validate_temperature(request.temperature));
  SIESTA_RETURN_IF_ERROR(validate_top_p(request.top_p));
  SIESTA_RETURN_IF_ERROR(validate_min_p(request.min_p));
  SIESTA_RETURN_IF_ERROR(validate_logit_bias(request.logit_bias));
  if (request.logprobs > kMaxTopLogprobs) {
    return InvalidArgument("logprobs " + std::to_string(request.logprobs) +
                           " is out of range: at most " + std::to_string(kMaxTopLogprobs) +
                           " alternatives per token");
  }
  return Status::Ok();
}

Status discard_history_after(Session& session, Status error) {
  Status discarded = session.discard_history();
  if (discarded.ok()) return error;
  return Status(error.code(), error.message() + "; discarding the history then failed too: " +
                                  discarded.to_string());
}

Generation::Generation(const GenerateRequest& request, Session& session, Kernels& kernels,
                       const ModelConfig& config, Admission admission, uint32_t session_id,
                       PrefillSpeed& prefill_speed, std::function<void()> on_progress)
    : request_(request),
      session_(session),
      kernels_(kernels),
      config_(config),
      prefill_speed_(prefill_speed),
      on_progress_(std::move(on_progress)),
      matcher_(request.stop) {
  result_.admission = admission;
  result_.session = session_id;
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
  // Sampled, or greedy over logits the bias changed: the choice is made on the host. Greedy
  // without a bias is the session's own choice, made on the device (greedy_next()).
  if (request_.temperature > 0 || !request_.logit_bias.empty()) {
    Result<Sampler> made = Sampler::create(request_.temperature, request_.seed, request_.top_p,
                                           request_.top_k, request_.min_p);
    if (!made.ok()) return end(made.status());
    sampler_.emplace(*made);
  }
  if (request_.on_start) request_.on_start(result_.session);
  prompt_ = encode(request_.prompt);
  result_.prompt_tokens = static_cast<uint32_t>(prompt_.size());
  // validate_request() checked that the prompt leaves room for at least one token.
  limit_ = request_.max_tokens != 0 ? request_.max_tokens
                                    : config_.context - static_cast<uint32_t>(prompt_.size());
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
  pacer_.emplace(kernels_, session_.prefill_block(), fed_, SystemClock::instance(), prefill_speed_);
  phase_ = Phase::kPrefill;
  return prefill_block();  // the first block in the same step: a step always moves on
}

bool Generation::prefill_block() {
  // The history stays a prefix of the prompt, so a cancelled request's work is reused by the
  // next prompt that starts the same way. Checked before every prefill block.
  if (cancelled()) return end(result_);
  if (fed_ == prompt_.size()) {  // all of it was reused (the prompt-end checkpoint)
    if (!end_prefill()) return true;
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
  if (fed_ == prompt_.size() && !end_prefill()) return true;
  return false;
}

bool Generation::end_prefill() {
  // Where the prompt ends, the session keeps its state (and the logits that follow), so that
  // asking this prompt again, or editing what comes after it, reads none of it again.
  Status kept = session_.checkpoint_prompt_end();
  if (!kept.ok()) {
    Status failed = discard_history_after(session_, kept);
    on_progress_();
    end(failed);
    return false;
  }
  phase_ = Phase::kDecode;
  return true;
}

void Generation::emit(const std::string& piece) {
  if (piece.empty()) return;
  result_.text += piece;
  if (request_.on_text) request_.on_text(piece);
}

bool Generation::decode_token() {
  if (result_.completion_tokens == 0 && cancelled()) return end(result_);
  Result<Token> next = Internal("no token");
  // The logits come to the host only when something here reads them: a sampler (temperature
  // or a logit bias) or the log probabilities. Greedy decoding alone reads only the token.
  std::vector<float> logits;
  if (sampler_ || request_.logprobs > 0) {
    Result<std::vector<float>> downloaded = session_.next_logits();
    if (!downloaded.ok()) {
      Status failed = discard_history_after(session_, downloaded.status());
      on_progress_();
      return end(failed);
    }
    logits = std::move(downloaded).value();
  }
  if (sampler_) {
    std::vector<float> biased = logits;
    apply_logit_bias(biased, request_.logit_bias);
    next = sampler_->sample(biased);
  } else {
    next = session_.greedy_next();
  }
  if (!next.ok()) {
    Status failed = discard_history_after(session_, next.status());
    on_progress_();
    return end(failed);
  }
  ++result_.completion_tokens;
  result_.tokens.push_back(*next);
  if (request_.logprobs > 0) {
    const std::vector<float> logprobs = log_softmax(logits);
    result_.logprobs.push_back(
        {*next, logprobs[*next], most_probable(logprobs, request_.logprobs)});
  }
  emit(matcher_.push(static_cast<char>(*next)));
  if (matcher_.finished()) {
    result_.finish = FinishReason::kStop;
    return end(result_);
  }
  if (result_.completion_tokens == limit_) {
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
