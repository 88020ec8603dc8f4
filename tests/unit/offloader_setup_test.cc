// Creating an Offloader, and what it says without a log callback: offload on without a store,
// a key or an executor, or with a session name the store cannot use, is InvalidArgument and
// nothing is armed; without a log callback each line goes to stderr prefixed "siesta: ". And
// the names of values no code produces are "unknown", never undefined behaviour.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/base/status.h"
#include "core/offload/offload_config.h"
#include "core/offload/offloader.h"
#include "tests/support/offloader_fixture.h"

namespace siesta {
namespace {

using test_util::OffloaderFixture;
using ::testing::HasSubstr;

OffloaderOptions enabled() {
  OffloaderOptions options;
  options.config.idle_seconds = OffloaderFixture::kIdle;
  options.config.expire_seconds = OffloaderFixture::kExpire;
  return options;
}

// Guards: offload on with a missing dependency accepted (a null dereference at the first
// timer), or the session name not checked.
TEST(OffloaderSetupTest, OffloadOnNeedsAStoreAKeyAnExecutorAndAValidSessionName) {
  OffloaderFixture f;
  f.offloader_.reset();
  const size_t armed_before = f.executor_.pending();  // the dropped offloader's timer
  Offloader::Deps full{*f.target_, *f.sim_,      f.host_,        f.fs_,
                       f.clock_,   &f.executor_, f.store_.get(), f.key_.get()};
  for (int missing = 0; missing < 3; ++missing) {
    Offloader::Deps deps = full;
    if (missing == 0) deps.store = nullptr;
    if (missing == 1) deps.key = nullptr;
    if (missing == 2) deps.executor = nullptr;
    Result<std::unique_ptr<Offloader>> made = Offloader::create(deps, enabled());
    EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument) << missing;
    EXPECT_THAT(made.status().message(), HasSubstr("needs a snapshot store"));
  }
  OffloaderOptions bad_name = enabled();
  bad_name.session = "../elsewhere";
  EXPECT_EQ(Offloader::create(full, bad_name).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.executor_.pending(), armed_before) << "nothing armed by a refused offloader";
  OffloaderOptions disabled;  // off: none of them is needed
  Offloader::Deps bare{*f.target_, *f.sim_, f.host_, f.fs_, f.clock_};
  EXPECT_TRUE(Offloader::create(bare, disabled).ok());
}

TEST(OffloaderSetupTest, WithoutALogCallbackLinesGoToStderr) {
  OffloaderFixture f;
  f.offloader_.reset();
  OffloaderOptions options = enabled();  // no log callback
  std::unique_ptr<Offloader> offloader =
      Offloader::create({*f.target_, *f.sim_, f.host_, f.fs_, f.clock_, &f.executor_,
                         f.store_.get(), f.key_.get()},
                        options)
          .value();
  ::testing::internal::CaptureStderr();
  f.pass(OffloaderFixture::kIdle);  // the save logs one line
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(offloader->status().state, OffloadState::kDisk);
  EXPECT_THAT(logged, HasSubstr("siesta: offload: saved "));
  offloader.reset();
}

TEST(OffloaderSetupTest, NamesOfValuesNoCodeProducesAreUnknown) {
  EXPECT_EQ(fallback_reason_name(static_cast<FallbackReason>(kFallbackReasonCount)), "unknown");
  EXPECT_EQ(offload_state_name(static_cast<OffloadState>(99)), "unknown");
  EXPECT_EQ(status_code_name(static_cast<StatusCode>(99)), "unknown");
  OffloadConfigProblem problem{static_cast<OffloadConfigRule>(99), 1, 2};
  EXPECT_EQ(offload_config_problem_text(problem), "the offload settings are invalid");
}

}  // namespace
}  // namespace siesta
