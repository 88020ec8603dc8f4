// MultiRangeOffloaderRig: the OffloaderFixture's storage, clock, executor and backends with a
// MultiRangeOffloadTarget (several device and host ranges) in place of its FakeOffloadTarget.
// The fixture's own Offloader is dropped first, so that only one Offloader uses the session's
// snapshot name.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/offload/offloader.h"
#include "tests/support/multi_range_offload_target.h"
#include "tests/support/offloader_fixture.h"

namespace siesta::test_util {

struct MultiRangeOffloaderRig {
  // Two device reservations (2 and 3 granules) and two host ranges (3 and 5 pages).
  MultiRangeOffloaderRig() {
    f.offloader_.reset();
    const size_t granule = f.sim_->granularity();
    target = MultiRangeOffloadTarget::create(*f.sim_, f.host_, {2 * granule, 3 * granule},
                                             {3 * HostVmm::page_size(), 5 * HostVmm::page_size()});
    if (target == nullptr) return;
    OffloaderOptions options;
    options.config.idle_seconds = OffloaderFixture::kIdle;
    options.config.expire_seconds = OffloaderFixture::kExpire;
    options.chunk_bytes = 4096;
    options.on_fatal = [this](const Status& s) { fatal.push_back(s); };
    options.log = [this](const std::string& line) { log.push_back(line); };
    offloader = Offloader::create({*target, *f.hooked_backend_, f.host_, f.fs_, f.clock_,
                                   &f.executor_, f.store_.get(), f.key_.get()},
                                  options)
                    .value();
  }
  ~MultiRangeOffloaderRig() { offloader.reset(); }
  MultiRangeOffloaderRig(const MultiRangeOffloaderRig&) = delete;
  MultiRangeOffloaderRig& operator=(const MultiRangeOffloaderRig&) = delete;

  bool ok() const { return offloader != nullptr; }
  OffloadState state() const { return offloader->status().state; }

  // A command that changes every byte, then idle until the save has released the memory.
  // Fails the test unless the session ends up on disk.
  void sleep_after_a_command() {
    Result<Offloader::Lease> lease = offloader->acquire();
    ASSERT_TRUE(lease.ok()) << lease.status().to_string();
    target->advance();
    lease->release();
    f.pass(OffloaderFixture::kIdle);
    ASSERT_EQ(state(), OffloadState::kDisk);
  }

  OffloaderFixture f;
  std::unique_ptr<MultiRangeOffloadTarget> target;
  std::unique_ptr<Offloader> offloader;
  std::vector<Status> fatal;
  std::vector<std::string> log;
};

}  // namespace siesta::test_util
