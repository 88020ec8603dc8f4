// Property: a prompt gives the same bytes however it is cut into prefill blocks. RapidCheck
// draws a prompt (random bytes, up to 1200 tokens: synthetic:tiny at a 1300-token context, so
// prompts cross attention tiles, chunks and checkpoints), a KV type, a list of block sizes
// (1 to kMaxPrefillBlock, 1 often), and how the blocked session gets there:
//   - fresh: the prompt in those blocks;
//   - cached prefix: a prefix first (in those blocks), then the whole prompt, reusing the
//     prefix down to its newest checkpoint, as a returning conversation does;
//   - after a fallback: some other text, discard_history(), then the prompt.
// The reference reads the same prompt one token at a time through the decode graph. Every
// used byte of every kContents region (KV rows, recurrent state, history, checkpoints,
// session.meta), the next logits and a greedy continuation must be equal, bit for bit.
//
// Case count and seed: RC_PARAMS (printed at start-up; ctest sets max_success).
#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/session.h"
#include "tests/support/engine_test_util.h"
#include "tests/support/prefill_split.h"
#include "tests/support/rapidcheck_params.h"

namespace siesta::engine {
namespace {

using test_util::capture;
using test_util::feed_in_blocks;
using test_util::SessionBytes;

enum class Path { kFresh, kCachedPrefix, kAfterFallback };

struct Case {
  std::vector<Token> prompt;
  std::vector<uint32_t> cuts;
  KvType type;
  Path path;
  uint32_t prefix;  // kCachedPrefix: tokens read first; kAfterFallback: other tokens read
};

rc::Gen<Case> case_gen() {
  const auto length = rc::gen::weightedOneOf<size_t>(
      {{6, rc::gen::inRange<size_t>(1, 200)}, {1, rc::gen::inRange<size_t>(200, 1201)}});
  const auto cut =
      rc::gen::weightedOneOf<uint32_t>({{1, rc::gen::just<uint32_t>(1)},
                                        {1, rc::gen::inRange<uint32_t>(2, 9)},
                                        {2, rc::gen::inRange<uint32_t>(9, kMaxPrefillBlock + 1)}});
  return rc::gen::mapcat(length, [cut](size_t n) {
    return rc::gen::build<Case>(
        rc::gen::set(&Case::prompt,
                     rc::gen::container<std::vector<Token>>(n, rc::gen::arbitrary<Token>())),
        rc::gen::set(
            &Case::cuts,
            rc::gen::resize(6, rc::gen::nonEmpty(rc::gen::container<std::vector<uint32_t>>(cut)))),
        rc::gen::set(&Case::type, rc::gen::element(KvType::kF32, KvType::kF16, KvType::kInt8)),
        rc::gen::set(&Case::path,
                     rc::gen::element(Path::kFresh, Path::kCachedPrefix, Path::kAfterFallback)),
        rc::gen::set(&Case::prefix, rc::gen::inRange<uint32_t>(1, static_cast<uint32_t>(n) + 1)));
  });
}

RC_GTEST_PROP(PrefillSplitProperty, EveryCutGivesTheBytesOfOneTokenAtATime, ()) {
  const Case c = *case_gen();
  ModelConfig config = test_util::tiny(c.type, 1300);
  config.prefill_block = kMaxPrefillBlock;  // each block's size is the cut's
  test_util::Rig rig;
  RC_ASSERT(rig.init(config).ok());
  Result<std::unique_ptr<Session>> made =
      Session::create(*rig.model, *rig.backend, *rig.kernels, rig.host);
  RC_ASSERT(made.ok());
  std::unique_ptr<Session> blocked = std::move(made).value();
  const std::vector<uint32_t> ones = {1};
  RC_ASSERT(feed_in_blocks(*rig.session, c.prompt, 0, ones).ok());

  size_t from = 0;
  if (c.path == Path::kCachedPrefix && c.prefix < c.prompt.size()) {
    RC_ASSERT(feed_in_blocks(*blocked, std::span(c.prompt).first(c.prefix), 0, c.cuts).ok());
    Result<uint32_t> reused = blocked->reuse_prefix(c.prompt);
    RC_ASSERT(reused.ok());
    from = *reused;
  } else if (c.path == Path::kAfterFallback) {
    const std::vector<Token> other(std::min<size_t>(c.prefix, 300), Token{'#'});
    RC_ASSERT(feed_in_blocks(*blocked, other, 0, c.cuts).ok());
    RC_ASSERT(blocked->discard_history().ok());
  }
  RC_ASSERT(feed_in_blocks(*blocked, c.prompt, from, c.cuts).ok());

  Result<SessionBytes> want = capture(*rig.session, *rig.backend, *rig.kernels, 8);
  Result<SessionBytes> got = capture(*blocked, *rig.backend, *rig.kernels, 8);
  RC_ASSERT(want.ok());
  RC_ASSERT(got.ok());
  const std::string difference = test_util::first_difference(*want, *got);
  RC_ASSERT(difference == std::string());  // RapidCheck prints where they differ
}

}  // namespace
}  // namespace siesta::engine
