// The snapshot key file (core/snapshot/key_file.h) on a real file system: made once, private
// and whole, read back the same by every load (racing ones too); everything else refused with
// one line naming the file, the fault and the remedy, never the key, and left as it was.
// ProcessKey::with_key: the key given, a nonce of its own.
#include "core/snapshot/key_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/base/hex.h"
#include "core/base/log_text.h"
#include "tests/support/backend_test_util.h"
#include "tests/support/call_faults.h"
#include "tests/support/temp_dir.h"

namespace siesta {
namespace {

using ::siesta::testing::TempDir;
using test_util::CallFault;
using test_util::ScopedCallFault;
using ::testing::HasSubstr;

// Names here carry a key_file_ prefix: the binary is built in unity batches.
std::vector<uint8_t> key_file_contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Writes `bytes` to a new file at `path` with exactly `mode`.
void key_file_plant(const std::string& path, const std::vector<uint8_t>& bytes, mode_t mode) {
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  ASSERT_EQ(::chmod(path.c_str(), mode), 0) << path;
}

std::vector<uint8_t> key_file_random(size_t n) {
  std::vector<uint8_t> bytes(n);
  EXPECT_TRUE(random_bytes(bytes).ok());
  return bytes;
}

mode_t key_file_mode(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::vector<std::string> key_file_names_in(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Fails when `message` holds any 6 bytes in a row of `secret`: raw, or in hex of either case.
void key_file_expect_secret_absent(const std::string& message, std::span<const uint8_t> secret) {
  constexpr size_t kWindow = 6;
  for (size_t i = 0; i + kWindow <= secret.size(); ++i) {
    const std::span<const uint8_t> window = secret.subspan(i, kWindow);
    const std::string raw(window.begin(), window.end());
    std::string hex = to_hex(window), upper = hex;
    std::transform(upper.begin(), upper.end(), upper.begin(), [](char c) {
      return static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    });
    EXPECT_EQ(message.find(raw), std::string::npos) << "raw bytes at " << i << ": " << message;
    EXPECT_EQ(message.find(hex), std::string::npos) << "hex at " << i << ": " << message;
    EXPECT_EQ(message.find(upper), std::string::npos) << "HEX at " << i << ": " << message;
  }
}

// A refusal's shape: its code, one line naming the file (as quote_for_log spells it), the
// fault and the remedy, and nothing of the bytes the file held.
void key_file_expect_refusal(const Result<LoadedKey>& loaded, const std::string& path,
                             StatusCode code, const std::string& fault, const std::string& remedy,
                             std::span<const uint8_t> secret = {}) {
  ASSERT_FALSE(loaded.ok()) << path << " was accepted";
  const Status& status = loaded.status();
  EXPECT_EQ(status_code_name(status.code()), status_code_name(code)) << status.to_string();
  EXPECT_THAT(status.message(), HasSubstr("key file " + quote_for_log(path)));
  EXPECT_THAT(status.message(), HasSubstr(fault));
  EXPECT_THAT(status.message(), HasSubstr(remedy));
  EXPECT_EQ(status.message().find('\n'), std::string::npos) << status.message();
  key_file_expect_secret_absent(status.message(), secret);
}

TEST(KeyFileTest, MakesAPrivateFileOfThirtyTwoBytesAndReadsItBack) {
  TempDir dir;
  const std::string path = dir.file("key");
  SIESTA_ASSERT_OK_AND_ASSIGN(LoadedKey made, load_or_create_key_file(path));
  EXPECT_TRUE(made.created);
  EXPECT_EQ(key_file_mode(path), 0600u);
  const std::vector<uint8_t> on_disk = key_file_contents(path);
  ASSERT_EQ(on_disk.size(), 32u);
  EXPECT_TRUE(std::equal(on_disk.begin(), on_disk.end(), made.key.key_bytes().begin()));
  EXPECT_NE(made.key.key_bytes(), ProcessKey::KeyBytes{}) << "a key of zeros";
  // No temporary name outlives the call.
  EXPECT_EQ(key_file_names_in(dir.path()), std::vector<std::string>{"key"});

  SIESTA_ASSERT_OK_AND_ASSIGN(LoadedKey again, load_or_create_key_file(path));
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.key.key_bytes(), made.key.key_bytes());
  // Each load is a process of its own: same key, its own nonce.
  EXPECT_NE(again.key.nonce(), made.key.nonce());
  EXPECT_EQ(key_file_contents(path), on_disk) << "a load rewrote the file";
}

// A key file written by someone else (a deployment tool) is read as it is.
TEST(KeyFileTest, ReadsAKeyFileItDidNotMake) {
  TempDir dir;
  const std::string path = dir.file("key");
  const std::vector<uint8_t> key = key_file_random(32);
  key_file_plant(path, key, 0600);
  SIESTA_ASSERT_OK_AND_ASSIGN(LoadedKey loaded, load_or_create_key_file(path));
  EXPECT_FALSE(loaded.created);
  EXPECT_TRUE(std::equal(key.begin(), key.end(), loaded.key.key_bytes().begin()));
  // Owner-only read is enough (the file is never written again).
  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);
  SIESTA_ASSERT_OK_AND_ASSIGN(LoadedKey read_only, load_or_create_key_file(path));
  EXPECT_EQ(read_only.key.key_bytes(), loaded.key.key_bytes());
}

// Guards: a file whose mode the umask decided (0400 under 0277, and readable by others under
// a umask that forgot them if the mode asked for were not 0600).
TEST(KeyFileTest, MakesItMode0600WhateverTheUmask) {
  for (const mode_t mask : {mode_t{0}, mode_t{0277}}) {
    SCOPED_TRACE("umask " + std::to_string(mask));
    TempDir dir;
    const std::string path = dir.file("key");
    const mode_t before = ::umask(mask);
    const Result<LoadedKey> made = load_or_create_key_file(path);
    ::umask(before);
    SIESTA_ASSERT_OK(made);
    EXPECT_EQ(key_file_mode(path), 0600u);
  }
}

// Racing makers: one links its file, the others read that one; nobody ends with a key the
// file does not hold, and no temporary name is left.
TEST(KeyFileTest, ConcurrentLoadsOfAFreshPathAgreeAndOneMakesIt) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 5; ++round) {
    TempDir dir;
    const std::string path = dir.file("key");
    std::vector<std::optional<Result<LoadedKey>>> results(kThreads);
    std::latch start(kThreads);
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        results[i].emplace(load_or_create_key_file(path));
      });
    }
    for (std::thread& thread : threads) thread.join();
    const std::vector<uint8_t> on_disk = key_file_contents(path);
    ASSERT_EQ(on_disk.size(), 32u);
    int created = 0;
    for (const std::optional<Result<LoadedKey>>& result : results) {
      ASSERT_TRUE(result.has_value());
      SIESTA_ASSERT_OK(*result);
      created += (*result)->created ? 1 : 0;
      EXPECT_TRUE(std::equal(on_disk.begin(), on_disk.end(), (*result)->key.key_bytes().begin()));
    }
    EXPECT_EQ(created, 1);
    EXPECT_EQ(key_file_names_in(dir.path()), std::vector<std::string>{"key"});
  }
}

TEST(KeyFileTest, RefusesAFileOpenToGroupOrOthersAndLeavesItAsItIs) {
  for (const mode_t mode : {0644, 0640, 0604, 0660, 0602, 0610, 0601, 0707}) {
    SCOPED_TRACE("mode " + std::to_string(mode));
    TempDir dir;
    const std::string path = dir.file("key");
    const std::vector<uint8_t> key = key_file_random(32);
    key_file_plant(path, key, mode);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(mode));
    key_file_expect_refusal(load_or_create_key_file(path), path, StatusCode::kFailedPrecondition,
                            std::string("open to group or others (mode ") + octal + ")",
                            "chmod 600 it", key);
    EXPECT_EQ(key_file_mode(path), mode);
    EXPECT_EQ(key_file_contents(path), key);
  }
}

// Guards: a name that is followed to whatever file (or key) someone points it at.
TEST(KeyFileTest, RefusesASymlinkEvenToAGoodKeyFile) {
  TempDir dir;
  const std::string target = dir.file("real-key");
  SIESTA_ASSERT_OK(load_or_create_key_file(target));
  const std::vector<uint8_t> key = key_file_contents(target);
  const std::string link = dir.file("key");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  key_file_expect_refusal(load_or_create_key_file(link), link, StatusCode::kFailedPrecondition,
                          "is a symlink", "give the file itself", key);
}

// Guards: a dangling symlink followed by the creation, making a key file wherever it points.
TEST(KeyFileTest, RefusesADanglingSymlinkAndMakesNothingThroughIt) {
  TempDir dir;
  const std::string target = dir.file("elsewhere");
  const std::string link = dir.file("key");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  key_file_expect_refusal(load_or_create_key_file(link), link, StatusCode::kFailedPrecondition,
                          "is a symlink", "give the file itself");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(target)));
  EXPECT_EQ(key_file_names_in(dir.path()), std::vector<std::string>{"key"});
}

TEST(KeyFileTest, RefusesADirectory) {
  TempDir dir;
  const std::string path = dir.file("key");
  ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  key_file_expect_refusal(load_or_create_key_file(path), path, StatusCode::kFailedPrecondition,
                          "is a directory, not a regular file", "give the path of a key file");
}

// Guards: open() blocking on a FIFO until some writer comes (the test would hang).
TEST(KeyFileTest, RefusesAFifoWithoutWaitingForAWriter) {
  TempDir dir;
  const std::string path = dir.file("key");
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  key_file_expect_refusal(load_or_create_key_file(path), path, StatusCode::kFailedPrecondition,
                          "is a FIFO, not a regular file", "give the path of a key file");
}

TEST(KeyFileTest, RefusesAFileOfAnotherSizeAndLeavesItAsItIs) {
  for (const size_t size : {size_t{0}, size_t{31}, size_t{33}, size_t{64}}) {
    SCOPED_TRACE("size " + std::to_string(size));
    TempDir dir;
    const std::string path = dir.file("key");
    const std::vector<uint8_t> bytes = key_file_random(size);
    key_file_plant(path, bytes, 0600);
    key_file_expect_refusal(load_or_create_key_file(path), path, StatusCode::kCorrupt,
                            "holds " + std::to_string(size) + " bytes, not the 32 of a key",
                            "remove it to make a new key", bytes);
    EXPECT_EQ(key_file_contents(path), bytes);
  }
}

TEST(KeyFileTest, RefusesAnotherUsersFile) {
  // Root can give a good key file away; anyone else can point at one of root's files.
  TempDir dir;
  std::string path = "/etc/passwd";
  uid_t owner = 0;
  std::vector<uint8_t> key;
  if (::geteuid() == 0) {
    path = dir.file("key");
    owner = 65534;  // nobody
    key = key_file_random(32);
    key_file_plant(path, key, 0600);
    ASSERT_EQ(::chown(path.c_str(), owner, owner), 0);
  } else {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0) {
      GTEST_SKIP() << "not root, and no root-owned regular /etc/passwd to point at";
    }
  }
  key_file_expect_refusal(load_or_create_key_file(path), path, StatusCode::kFailedPrecondition,
                          "is owned by uid " + std::to_string(owner) + ", not by this user (uid " +
                              std::to_string(::geteuid()) + ")",
                          "use a key file of this user's own", key);
}

TEST(KeyFileTest, AMissingDirectoryIsNotFoundAndMakesNothing) {
  TempDir dir;
  const std::string path = dir.file("missing/key");
  const Result<LoadedKey> loaded = load_or_create_key_file(path);
  key_file_expect_refusal(loaded, path, StatusCode::kNotFound,
                          "its directory " + quote_for_log(dir.file("missing")) + " does not exist",
                          "create it (mode 700) or give another path");
  EXPECT_TRUE(key_file_names_in(dir.path()).empty());
}

TEST(KeyFileTest, RefusesAnEmptyPathAndAPathEndingInASlash) {
  SIESTA_EXPECT_CODE(load_or_create_key_file(""), StatusCode::kInvalidArgument);
  TempDir dir;
  const std::string path = dir.path() + "/";
  key_file_expect_refusal(load_or_create_key_file(path), path, StatusCode::kInvalidArgument,
                          "ends in '/'", "give the path of a file");
  EXPECT_TRUE(key_file_names_in(dir.path()).empty());
}

// A bare name is made in the working directory (whose sync makes the name durable).
TEST(KeyFileTest, MakesABareNameInTheWorkingDirectory) {
  TempDir dir;
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const Result<LoadedKey> made = load_or_create_key_file("key");
  std::filesystem::current_path(before);
  SIESTA_ASSERT_OK(made);
  EXPECT_TRUE(made->created);
  EXPECT_EQ(key_file_contents(dir.file("key")).size(), 32u);
}

// The random generator failing at each of its calls: before the link nothing is left behind
// (neither the key file nor a temporary one); after it (the nonce) the file stays and a later
// load reads it.
TEST(KeyFileTest, ARandomGeneratorThatFailsIsInternalAndLeavesNoPartialFile) {
  for (const uint64_t nth : {1u, 2u}) {  // the temporary name's suffix, then the key
    const CallFault fault{.function = "RAND_bytes", .nth_call = nth};
    SCOPED_TRACE(fault.describe());
    TempDir dir;
    const std::string path = dir.file("key");
    ScopedCallFault armed(fault);
    const Result<LoadedKey> loaded = load_or_create_key_file(path);
    EXPECT_EQ(armed.fired(), 1u);
    SIESTA_EXPECT_CODE(loaded, StatusCode::kInternal);
    EXPECT_TRUE(key_file_names_in(dir.path()).empty());
  }
  const CallFault fault{.function = "RAND_bytes", .nth_call = 3};  // the nonce
  SCOPED_TRACE(fault.describe());
  TempDir dir;
  const std::string path = dir.file("key");
  {
    ScopedCallFault armed(fault);
    const Result<LoadedKey> loaded = load_or_create_key_file(path);
    EXPECT_EQ(armed.fired(), 1u);
    SIESTA_EXPECT_CODE(loaded, StatusCode::kInternal);
  }
  EXPECT_EQ(key_file_names_in(dir.path()), std::vector<std::string>{"key"});
  const std::vector<uint8_t> on_disk = key_file_contents(path);
  SIESTA_ASSERT_OK_AND_ASSIGN(LoadedKey later, load_or_create_key_file(path));
  EXPECT_FALSE(later.created);
  EXPECT_TRUE(std::equal(on_disk.begin(), on_disk.end(), later.key.key_bytes().begin()));
}

TEST(ProcessKeyWithKeyTest, KeepsTheKeyAndDrawsANonceOfItsOwn) {
  ProcessKey::KeyBytes bytes{};
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 1);
  SIESTA_ASSERT_OK_AND_ASSIGN(ProcessKey a, ProcessKey::with_key(bytes));
  SIESTA_ASSERT_OK_AND_ASSIGN(ProcessKey b, ProcessKey::with_key(bytes));
  EXPECT_EQ(a.key_bytes(), bytes);
  EXPECT_EQ(b.key_bytes(), bytes);
  EXPECT_NE(a.nonce(), b.nonce());
  EXPECT_NE(a.nonce(), snapshot::ProcessNonce{}) << "a nonce of zeros";
}

TEST(ProcessKeyWithKeyTest, ARandomGeneratorThatFailsIsInternal) {
  const CallFault fault{.function = "RAND_bytes"};
  SCOPED_TRACE(fault.describe());
  ScopedCallFault armed(fault);
  const Result<ProcessKey> key = ProcessKey::with_key(ProcessKey::KeyBytes{});
  EXPECT_EQ(armed.fired(), 1u);
  SIESTA_EXPECT_CODE(key, StatusCode::kInternal);
}

}  // namespace
}  // namespace siesta
