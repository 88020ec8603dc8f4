// ScriptedFileSystem: forwards every call to the wrapped FileSystem, except those a test has
// scripted an answer for: the calls FaultyFileSystem never fails (looking at a path, making a
// directory, listing one, free space, a readable file's size, a created file's close()), which
// the private directory rule, the store's clean-up, the writer's space check and close, and
// the reader's size check each handle. An answer sees the call's path and returns the result to
// give instead of forwarding, or nullopt to forward this call. Injected errors should say
// "injected".
//
// Thread rule: as the wrapped file system's; answers are set before the calls they script and
// run on the caller's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/file_system_wrapper.h"

namespace siesta::test_util {

class ScriptedFileSystem final : public FileSystemWrapper {
 public:
  template <class R>
  using Answer = std::function<std::optional<R>(const std::string& path)>;

  explicit ScriptedFileSystem(FileSystem& target) : FileSystemWrapper(target) {}

  Answer<Result<PathInfo>> stat_no_follow_answer;
  Answer<Result<PathInfo>> stat_directory_answer;
  Answer<Status> make_directory_answer;
  Answer<Result<std::vector<std::string>>> list_directory_answer;
  Answer<Result<uint64_t>> available_bytes_answer;
  // The answer to size() of every file opened for reading (called with the path it was opened
  // with), for files opened once it is set.
  Answer<Result<uint64_t>> readable_size_answer;
  // The answer to close() of every file created once it is set (called with its path), given
  // after the real close, so the descriptor is released either way (as Linux's close is).
  Answer<Status> writable_close_answer;

  Result<PathInfo> stat_no_follow(const std::string& path) override {
    return answer(stat_no_follow_answer, path, [&] { return target().stat_no_follow(path); });
  }
  Result<PathInfo> stat_directory(const std::string& path) override {
    return answer(stat_directory_answer, path, [&] { return target().stat_directory(path); });
  }
  Status make_directory(const std::string& path, uint32_t mode) override {
    return answer(make_directory_answer, path, [&] { return target().make_directory(path, mode); });
  }
  Result<std::vector<std::string>> list_directory(const std::string& path) override {
    return answer(list_directory_answer, path, [&] { return target().list_directory(path); });
  }
  Result<uint64_t> available_bytes(const std::string& path) override {
    return answer(available_bytes_answer, path, [&] { return target().available_bytes(path); });
  }
  Result<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                         uint32_t mode) override {
    Result<std::unique_ptr<WritableFile>> file = target().create_exclusive(path, mode);
    if (!file.ok() || !writable_close_answer) return file;
    return std::unique_ptr<WritableFile>(
        new Writable(std::move(file).value(), path, writable_close_answer));
  }
  Result<std::unique_ptr<ReadableFile>> open_readable(const std::string& path) override {
    Result<std::unique_ptr<ReadableFile>> file = target().open_readable(path);
    if (!file.ok() || !readable_size_answer) return file;
    return std::unique_ptr<ReadableFile>(
        new Readable(std::move(file).value(), path, readable_size_answer));
  }

 private:
  class Writable final : public WritableFileWrapper {
   public:
    Writable(std::unique_ptr<WritableFile> file, std::string path, Answer<Status> close)
        : WritableFileWrapper(std::move(file)), path_(std::move(path)), close_(std::move(close)) {}
    Status close() override {
      Status closed = target().close();
      if (std::optional<Status> given = close_(path_)) return *given;
      return closed;
    }

   private:
    std::string path_;
    Answer<Status> close_;
  };

  class Readable final : public ReadableFileWrapper {
   public:
    Readable(std::unique_ptr<ReadableFile> file, std::string path, Answer<Result<uint64_t>> size)
        : ReadableFileWrapper(std::move(file)), path_(std::move(path)), size_(std::move(size)) {}
    Result<uint64_t> size() override {
      if (std::optional<Result<uint64_t>> given = size_(path_)) return *given;
      return target().size();
    }

   private:
    std::string path_;
    Answer<Result<uint64_t>> size_;
  };

  template <class R, class Forward>
  static R answer(const Answer<R>& scripted, const std::string& path, Forward forward) {
    if (scripted) {
      if (std::optional<R> given = scripted(path)) return *given;
    }
    return forward();
  }
};

}  // namespace siesta::test_util
