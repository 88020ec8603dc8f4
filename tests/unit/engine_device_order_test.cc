// An export copies the session's memory, and an import writes it, only after the device work
// queued before them: Engine's synchronize() before each. The strict simulator runs a
// work-stream job only once something waits for it, so without that synchronize() an export
// copies the bytes from before the job and an import's bytes are overwritten by it afterwards,
// every time (a GPU copying on its own stream may do either).
//
// The queued "kernel" zeroes every KV row of the session (found from the session's device
// reservation and its SessionLayout). What a client sees tells the three histories apart: the
// continuation of the intact history, of the zeroed one, and of whatever the export or import
// gave.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backends/sim/host_kernels.h"
#include "backends/sim/sim_backend.h"
#include "core/base/clock.h"
#include "core/base/posix_file_system.h"
#include "core/memory/host_vmm.h"
#include "core/memory/memory_backend_wrapper.h"
#include "engine/engine.h"
#include "engine/session_layout.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using testing::text_of;
using testing::tiny_config;

// Remembers every reservation, so that the test can find the session's.
class RecordingBackend final : public MemoryBackendWrapper {
 public:
  using MemoryBackendWrapper::MemoryBackendWrapper;
  Result<DeviceRange> reserve(size_t bytes) override {
    Result<DeviceRange> range = target().reserve(bytes);
    if (range.ok()) reserved.emplace_back(bytes, *range);
    return range;
  }
  std::vector<std::pair<size_t, DeviceRange>> reserved;  // (bytes asked, range); engine start only
};

// An engine on its own simulator, exporting to `export_dir`.
class DeviceOrderRig {
 public:
  explicit DeviceOrderRig(const std::string& export_dir) {
    SimBackendOptions sim;
    sim.capacity_bytes = 256ull << 20;
    sim.granularity = 64u << 10;
    sim.staging_buffer_bytes = 96u << 10;
    sim.staging_buffer_count = 2;
    sim_ = SimBackend::create(sim).value();
    backend_ = std::make_unique<RecordingBackend>(*sim_);
    kernels_ = HostKernels::create(*sim_).value();
    EngineOptions options;
    options.model = tiny_config();
    options.export_dir = export_dir;
    engine_ = Engine::start(options, *backend_, *kernels_, host_, fs_, clock_).value();
    layout_ = SessionLayout::compute(engine_->config());
    for (const auto& [bytes, range] : backend_->reserved) {
      if (bytes == layout_.device_bytes) session_base_ = range.base;
    }
  }

  bool found_session() const { return session_base_.has_value(); }

  // Queues on the device's work stream, behind whatever is there, a job that zeroes every KV
  // row of the session: a kernel still running when the next command starts.
  void queue_kv_zeroing() {
    std::vector<std::pair<DeviceAddress, uint64_t>> kv;
    for (uint32_t layer = 0; layer < engine_->config().layers; ++layer) {
      for (size_t region : {layout_.k_region(layer), layout_.v_region(layer)}) {
        kv.emplace_back(*session_base_ + layout_.offset(region), layout_.regions[region].size);
      }
    }
    ASSERT_TRUE(sim_->enqueue_work([kv] {
                      for (const auto& [at, bytes] : kv) {
                        std::memset(reinterpret_cast<void*>(at), 0, bytes);
                      }
                      return Status::Ok();
                    })
                    .ok());
  }

  Result<GenerateResult> generate(std::string prompt) {
    GenerateRequest request;
    request.prompt = std::move(prompt);
    request.max_tokens = 12;
    return engine_->generate(std::move(request)).get();
  }
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<SimBackend> sim_;
  std::unique_ptr<RecordingBackend> backend_;
  std::unique_ptr<HostKernels> kernels_;
  HostVmm host_;
  PosixFileSystem fs_;
  ManualClock clock_;
  SessionLayout layout_;
  std::optional<DeviceAddress> session_base_;
  std::unique_ptr<Engine> engine_;  // last: destroyed first
};

const std::string kFirst = "In a hole in the ground there lived a hobbit";
const std::string kMore = " and then";

// The continuation of kFirst's history (its answer included) on an engine whose KV was zeroed
// after the first answer (`zeroed`) or left intact.
std::string continuation(const std::string& dir, bool zeroed) {
  DeviceOrderRig rig(dir);
  EXPECT_TRUE(rig.found_session());
  if (!rig.found_session()) return "";
  const std::string answer = text_of(rig.generate(kFirst));
  if (zeroed) rig.queue_kv_zeroing();
  return text_of(rig.generate(kFirst + answer + kMore));
}

// Guards: the synchronize() before an export (Engine::do_export) deleted. The export must
// hold the zeroed KV the queued job writes, as the exporting engine's own memory does once
// the job has run: the importing engine then continues exactly as the exporter does.
TEST(EngineDeviceOrderTest, AnExportWaitsForDeviceWorkQueuedBeforeIt) {
  siesta::testing::TempDir dir;
  const std::string exports = dir.file("exports");
  const std::string intact = continuation(exports, false);
  const std::string zeroed = continuation(exports, true);
  ASSERT_NE(intact, zeroed) << "zeroing the KV must change what a client sees";

  DeviceOrderRig exporter(exports);
  ASSERT_TRUE(exporter.found_session());
  const std::string answer = text_of(exporter.generate(kFirst));
  exporter.queue_kv_zeroing();
  Result<ExportResult> exported = exporter.engine().export_conversation("pending").get();
  ASSERT_TRUE(exported.ok()) << exported.status().to_string();
  const std::string prompt = kFirst + answer + kMore;
  EXPECT_EQ(text_of(exporter.generate(prompt)), zeroed);

  DeviceOrderRig importer(exports);
  Result<ImportResult> imported = importer.engine().import_conversation("pending").get();
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  Result<GenerateResult> continued = importer.generate(prompt);
  ASSERT_TRUE(continued.ok()) << continued.status().to_string();
  EXPECT_GT(continued->cached_tokens, 0u);
  EXPECT_EQ(continued->text, zeroed)
      << "the export holds the KV from before the queued job ran: it did not synchronize";
}

// Guards: the synchronize() before an import (Engine::do_import) deleted. A job queued before
// the import zeroes the KV; the import's bytes must land after it, not be zeroed by it.
TEST(EngineDeviceOrderTest, AnImportWaitsForDeviceWorkQueuedBeforeIt) {
  siesta::testing::TempDir dir;
  const std::string exports = dir.file("exports");
  const std::string intact = continuation(exports, false);
  const std::string zeroed = continuation(exports, true);
  ASSERT_NE(intact, zeroed) << "zeroing the KV must change what a client sees";

  DeviceOrderRig exporter(exports);
  const std::string answer = text_of(exporter.generate(kFirst));
  ASSERT_TRUE(exporter.engine().export_conversation("intact").get().ok());

  DeviceOrderRig importer(exports);
  ASSERT_TRUE(importer.found_session());
  ASSERT_TRUE(importer.generate("Something else entirely").ok());
  importer.queue_kv_zeroing();
  Result<ImportResult> imported = importer.engine().import_conversation("intact").get();
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(text_of(importer.generate(kFirst + answer + kMore)), intact)
      << "the queued job zeroed the imported KV: the import did not synchronize first";
}

}  // namespace
}  // namespace siesta::engine
