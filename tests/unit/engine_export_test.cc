// Engine export, import and erase: an export imported into a NEW engine (another simulated
// device, other addresses) continues exactly as the original would; an export of another model
// size or KV type is Foreign and leaves the session unchanged; export needs a directory and a
// valid name; a missing export is NotFound; a FIFO under an export's name is refused without
// blocking the engine and leaves the session unchanged; erase removes the file without a
// command; an import says how many bytes it read. A failure that leaves the session's memory
// unknown costs its history: the device's wait before an export or an import, the constants
// rebuilt after an import, a damaged export read over it; a file that cannot be written keeps
// it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/call_failing_kernels.h"
#include "tests/support/fifo_test_util.h"
#include "tests/support/temp_dir.h"
#include "tests/unit/engine_test_rig.h"

namespace siesta::engine {
namespace {

using testing::EngineRig;
using testing::text_of;
using testing::tiny_config;

constexpr char kExportPrompt[] = "It was a bright cold day in April,";

TEST(EngineExportTest, ImportIntoANewEngineContinuesExactlyAsTheOriginal) {
  siesta::testing::TempDir dir;
  std::string second_prompt;
  GenerateResult original;
  uint64_t exported_tokens = 0;
  {
    EngineRig a(tiny_config(), dir.path());
    ASSERT_TRUE(a.ok());
    // Long enough to cross several recurrent checkpoints (every 16 tokens for tiny).
    auto first = a.generate(kExportPrompt, 30);
    ASSERT_TRUE(first.ok());
    auto exported = a.engine().export_conversation("conversation-1").get();
    ASSERT_TRUE(exported.ok()) << exported.status().to_string();
    EXPECT_EQ(exported->tokens, a.history());
    EXPECT_GT(exported->bytes, 0u);
    exported_tokens = exported->tokens;
    EXPECT_EQ(a.history(), exported_tokens);  // exporting changes nothing

    second_prompt = kExportPrompt + first->text + " The clocks";
    auto second = a.generate(second_prompt, 25);
    ASSERT_TRUE(second.ok());
    original = *second;
  }
  // A new engine, a new device: the original is gone.
  EngineRig b(tiny_config(), dir.path());
  ASSERT_TRUE(b.ok());
  auto imported = b.engine().import_conversation("conversation-1").get();
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(imported->tokens, exported_tokens);
  EXPECT_EQ(imported->bytes, std::filesystem::file_size(dir.file("conversation-1")));
  EXPECT_EQ(b.history(), exported_tokens);
  auto continued = b.generate(second_prompt, 25);
  ASSERT_TRUE(continued.ok());
  EXPECT_EQ(continued->cached_tokens, original.cached_tokens);
  EXPECT_EQ(continued->cached_tokens, exported_tokens);
  EXPECT_EQ(continued->text, original.text);
}

TEST(EngineExportTest, ImportReplacesADifferentConversation) {
  siesta::testing::TempDir dir;
  EngineRig a(tiny_config(), dir.path()), reference;
  ASSERT_TRUE(a.ok() && reference.ok());
  ASSERT_TRUE(a.generate(kExportPrompt, 10).ok());
  ASSERT_TRUE(a.engine().export_conversation("saved").get().ok());
  const uint64_t saved_tokens = a.history();
  ASSERT_TRUE(a.generate("Something unrelated to the first prompt", 20).ok());
  auto imported = a.engine().import_conversation("saved").get();
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(imported->tokens, saved_tokens);
  ASSERT_TRUE(reference.generate(kExportPrompt, 10).ok());
  const std::string next = std::string(kExportPrompt) + " Winston";
  auto after = a.generate(next, 16);
  ASSERT_TRUE(after.ok());
  EXPECT_GT(after->cached_tokens, 0u);
  EXPECT_EQ(after->text, text_of(reference.generate(next, 16)));
}

TEST(EngineExportTest, ImportOfAnotherModelOrKvTypeIsForeignAndChangesNothing) {
  siesta::testing::TempDir dir;
  {
    EngineRig tiny(tiny_config(), dir.path());
    ASSERT_TRUE(tiny.ok());
    ASSERT_TRUE(tiny.generate(kExportPrompt, 8).ok());
    ASSERT_TRUE(tiny.engine().export_conversation("tiny-f32").get().ok());
  }
  for (const ModelConfig& other : {tiny_config(KvType::kF16), tiny_config(KvType::kInt8),
                                   tiny_config(std::nullopt, "synthetic:small")}) {
    SCOPED_TRACE(other.name + " " + std::string(kv_type_name(other.kv_type)));
    EngineRig rig(other, dir.path()), reference(other);
    ASSERT_TRUE(rig.ok() && reference.ok());
    auto own = rig.generate("Its own conversation", 6);
    ASSERT_TRUE(own.ok());
    ASSERT_TRUE(reference.generate("Its own conversation", 6).ok());
    const uint64_t history = rig.history();
    auto imported = rig.engine().import_conversation("tiny-f32").get();
    ASSERT_FALSE(imported.ok());
    EXPECT_EQ(imported.status().code(), StatusCode::kForeign) << imported.status().to_string();
    EXPECT_EQ(rig.history(), history);
    const std::string next = "Its own conversation" + own->text + " continued";
    auto after = rig.generate(next, 12);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->cached_tokens, history);  // the history survived, bytes and all
    EXPECT_EQ(after->text, text_of(reference.generate(next, 12)));
  }
}

TEST(EngineExportTest, WithoutADirectoryExportAndImportAreRefused) {
  EngineRig rig;
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(rig.generate(kExportPrompt, 4).ok());
  const uint64_t history = rig.history();
  auto exported = rig.engine().export_conversation("x").get();
  EXPECT_EQ(exported.status().code(), StatusCode::kFailedPrecondition);
  auto imported = rig.engine().import_conversation("x").get();
  EXPECT_EQ(imported.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(rig.history(), history);
}

TEST(EngineExportTest, InvalidNamesAreRefusedAndMissingExportsAreNotFound) {
  siesta::testing::TempDir dir;
  EngineRig rig(tiny_config(), dir.path());
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(rig.generate(kExportPrompt, 4).ok());
  const uint64_t history = rig.history();
  for (const char* name : {"", "../escape", ".hidden", "a/b", "x.tmp-1", "bad\nname"}) {
    EXPECT_EQ(rig.engine().export_conversation(name).get().status().code(),
              StatusCode::kInvalidArgument)
        << name;
    EXPECT_EQ(rig.engine().import_conversation(name).get().status().code(),
              StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_EQ(rig.engine().import_conversation("never-written").get().status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(rig.history(), history);
}

TEST(EngineExportTest, EraseRemovesTheFileWithoutACommand) {
  siesta::testing::TempDir dir;
  EngineRig rig(tiny_config(), dir.path());
  ASSERT_TRUE(rig.ok());
  ASSERT_TRUE(rig.generate(kExportPrompt, 4).ok());
  ASSERT_TRUE(rig.engine().export_conversation("gone").get().ok());
  const uint64_t commands = rig.engine().status().commands_run;
  SIESTA_EXPECT_OK(rig.engine().erase_export("gone"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("gone")));
  EXPECT_EQ(rig.engine().status().commands_run, commands) << "no command, no session woken";
  EXPECT_EQ(rig.engine().erase_export("gone").code(), StatusCode::kNotFound);
  EXPECT_EQ(rig.engine().erase_export("../up").code(), StatusCode::kInvalidArgument);
  EngineRig without;
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without.engine().erase_export("x").code(), StatusCode::kFailedPrecondition);
}

TEST(EngineExportTest, AFifoUnderAnExportsNameIsRefusedAndTheEngineGoesOn) {
  siesta::testing::TempDir dir;
  EngineRig rig(tiny_config(), dir.path()), reference;
  ASSERT_TRUE(rig.ok() && reference.ok());
  auto first = rig.generate(kExportPrompt, 8);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(reference.generate(kExportPrompt, 8).ok());
  const uint64_t history = rig.history();
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result<ImportResult> imported = Internal("not run");
  EXPECT_TRUE(siesta::test_util::finishes_without_blocking(fifo, [&] {
    imported = rig.engine().import_conversation("fifo").get();
  })) << "the engine blocked on a FIFO";
  EXPECT_EQ(imported.status().code(), StatusCode::kFailedPrecondition)
      << imported.status().to_string();
  EXPECT_EQ(rig.history(), history) << "a refused import changes nothing";
  const std::string next = kExportPrompt + first->text + " More";
  auto after = rig.generate(next, 12);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->cached_tokens, history);
  EXPECT_EQ(after->text, text_of(reference.generate(next, 12)));
}

// The engine waits for the device before it copies the regions: when that wait fails, or the
// constants cannot be rebuilt after an import, the session's memory is unknown and its history
// is discarded; nothing is written. Once the device works the file imports as it was written.
TEST(EngineExportTest, ADeviceFailureAroundAnExportOrImportCostsTheHistory) {
  siesta::testing::TempDir dir;
  siesta::testing::CallFailingKernels* kernels = nullptr;
  EngineRig rig(tiny_config(), dir.path(), [&kernels](Kernels& inner) {
    auto wrapped = std::make_unique<siesta::testing::CallFailingKernels>(inner);
    kernels = wrapped.get();
    return wrapped;
  });
  EngineRig reference;
  ASSERT_TRUE(rig.ok() && reference.ok() && kernels != nullptr);
  auto first = rig.generate(kExportPrompt, 8);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(rig.engine().export_conversation("saved").get().ok());
  const uint64_t saved_tokens = rig.history();

  kernels->arm(1);  // the wait before the copy
  auto exported = rig.engine().export_conversation("other").get();
  EXPECT_EQ(kernels->fired(), std::string("synchronize"));
  EXPECT_EQ(exported.status().code(), StatusCode::kDeviceError) << exported.status().to_string();
  EXPECT_FALSE(std::filesystem::exists(dir.file("other")));
  EXPECT_EQ(rig.history(), 0u);

  for (uint64_t call : {1u, 2u}) {  // the wait before the copy; the RoPE table rebuilt after it
    SCOPED_TRACE("kernels call " + std::to_string(call) + " of the import");
    kernels->disarm();
    ASSERT_TRUE(rig.generate("Something unrelated to the first prompt", 6).ok());
    kernels->arm(call);
    auto imported = rig.engine().import_conversation("saved").get();
    ASSERT_NE(kernels->fired(), nullptr);
    EXPECT_EQ(imported.status().code(), StatusCode::kDeviceError) << imported.status().to_string();
    EXPECT_EQ(rig.history(), 0u);
  }

  kernels->disarm();
  auto imported = rig.engine().import_conversation("saved").get();
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  EXPECT_EQ(imported->tokens, saved_tokens);
  ASSERT_TRUE(reference.generate(kExportPrompt, 8).ok());
  const std::string next = kExportPrompt + first->text + " More";
  auto after = rig.generate(next, 12);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->cached_tokens, saved_tokens);
  EXPECT_EQ(after->text, text_of(reference.generate(next, 12)));
}

// A damaged export is found only as its chunks are read, after earlier ones were copied into
// the session: the conversation it was imported over is discarded, never continued from a mix
// of its own bytes and the file's.
TEST(EngineExportTest, ADamagedExportCostsTheHistoryItWasReadOver) {
  siesta::testing::TempDir dir;
  EngineRig rig(tiny_config(), dir.path()), reference;
  ASSERT_TRUE(rig.ok() && reference.ok());
  ASSERT_TRUE(rig.generate(kExportPrompt, 30).ok());
  ASSERT_TRUE(rig.engine().export_conversation("saved").get().ok());
  {
    const std::string path = dir.file("saved");
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(path));
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(size * 3 / 4);
    const char byte = static_cast<char>(file.get());
    file.seekp(size * 3 / 4);
    file.put(static_cast<char>(byte ^ 0x20));
    ASSERT_TRUE(file.good());
  }
  const std::string own = "Something unrelated to the first prompt";
  auto before = rig.generate(own, 6);
  ASSERT_TRUE(before.ok());
  ASSERT_GT(rig.history(), 0u);

  auto imported = rig.engine().import_conversation("saved").get();
  ASSERT_FALSE(imported.ok());
  EXPECT_EQ(imported.status().code(), StatusCode::kCorrupt) << imported.status().to_string();
  EXPECT_EQ(rig.history(), 0u);
  const std::string next = own + before->text + " continued";
  auto after = rig.generate(next, 12);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->cached_tokens, 0u);
  EXPECT_EQ(after->text, text_of(reference.generate(next, 12)));
}

// The file cannot be made (its directory is gone): the export fails with the file system's
// error and the conversation, untouched, continues from all of its history.
TEST(EngineExportTest, AnExportThatCannotBeWrittenKeepsTheConversation) {
  siesta::testing::TempDir dir;
  const std::string exports = dir.file("exports");
  ASSERT_TRUE(std::filesystem::create_directory(exports));
  EngineRig rig(tiny_config(), exports), reference;
  ASSERT_TRUE(rig.ok() && reference.ok());
  auto first = rig.generate(kExportPrompt, 8);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(reference.generate(kExportPrompt, 8).ok());
  const uint64_t history = rig.history();
  ASSERT_TRUE(std::filesystem::remove(exports));

  auto exported = rig.engine().export_conversation("saved").get();
  ASSERT_FALSE(exported.ok());
  EXPECT_NE(exported.status().code(), StatusCode::kInvalidArgument)
      << exported.status().to_string();
  EXPECT_EQ(rig.history(), history);
  const std::string next = kExportPrompt + first->text + " More";
  auto after = rig.generate(next, 12);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->cached_tokens, history);
  EXPECT_EQ(after->text, text_of(reference.generate(next, 12)));
}

}  // namespace
}  // namespace siesta::engine
