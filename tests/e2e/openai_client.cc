#include "tests/e2e/openai_client.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>

#include "tests/e2e/raw_http.h"

namespace siesta::testing {
namespace {

using nlohmann::json;

// Reads choices[0] and usage of a chunk or a whole answer into `out`; text is appended.
Status read_choice(const json& body, bool chat, bool streamed, Completion& out) {
  if (!body.contains("choices") || !body["choices"].is_array()) {
    return Internal("no choices array: " + body.dump());
  }
  if (!body["choices"].empty()) {
    const json& choice = body["choices"][0];
    const json* text = nullptr;
    if (chat) {
      const char* holder = streamed ? "delta" : "message";
      if (choice.contains(holder) && choice[holder].contains("content")) {
        text = &choice[holder]["content"];
      } else if (!streamed) {
        return Internal("no choices[0].message.content: " + body.dump());
      }
    } else {
      if (!choice.contains("text")) return Internal("no choices[0].text: " + body.dump());
      text = &choice["text"];
    }
    if (text != nullptr && !text->is_null()) {
      if (!text->is_string()) return Internal("the text is not a string: " + body.dump());
      out.text += text->get<std::string>();
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
      out.finish_reason = choice["finish_reason"].get<std::string>();
    }
  }
  if (body.contains("usage") && body["usage"].is_object()) {
    const json& usage = body["usage"];
    out.prompt_tokens = usage.value("prompt_tokens", int64_t{-1});
    out.completion_tokens = usage.value("completion_tokens", int64_t{-1});
    if (usage.contains("prompt_tokens_details") && usage["prompt_tokens_details"].is_object()) {
      out.cached_tokens = usage["prompt_tokens_details"].value("cached_tokens", int64_t{-1});
    }
  } else if (!streamed) {
    return Internal("no usage object: " + body.dump());
  }
  return Status::Ok();
}

bool is_chat(const std::string& path) { return path.find("chat") != std::string::npos; }

}  // namespace

json completion_request(const std::string& prompt, int max_tokens) {
  return {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

Result<Completion> complete(const ServerProcess& server, const json& request,
                            const std::string& path) {
  httplib::Result response = server.post_json(path, request);
  if (!response) return Internal("POST " + path + ": " + httplib::to_string(response.error()));
  Completion out;
  out.http_status = response->status;
  out.body = json::parse(response->body, nullptr, false);
  if (out.body.is_discarded()) {
    return Internal("POST " + path + " answered " + std::to_string(response->status) +
                    " with a body that is not JSON: " + response->body);
  }
  if (out.http_status == 200) {
    SIESTA_RETURN_IF_ERROR(read_choice(out.body, is_chat(path), false, out));
  }
  return out;
}

Result<Completion> complete_streamed(const ServerProcess& server, json request,
                                     const std::string& path) {
  request["stream"] = true;
  request["stream_options"] = {{"include_usage", true}};
  SIESTA_ASSIGN_OR_RETURN(SseStream stream, SseStream::open(server.port(), path, request.dump(),
                                                            bearer(server.api_key())));
  Completion out;
  out.http_status = stream.head().status;
  if (out.http_status != 200) {
    SIESTA_ASSIGN_OR_RETURN(std::string rest, stream.read_rest());
    out.body = json::parse(rest, nullptr, false);
    return out;
  }
  const std::string type = stream.head().header("content-type");
  if (type.find("text/event-stream") == std::string::npos) {
    return Internal("streamed answer with Content-Type \"" + type + "\"");
  }
  while (true) {
    SIESTA_ASSIGN_OR_RETURN(std::optional<std::string> data, stream.next_data());
    if (!data) return Internal("the stream ended without data: [DONE]");
    if (*data == "[DONE]") break;
    json chunk = json::parse(*data, nullptr, false);
    if (chunk.is_discarded()) return Internal("a chunk that is not JSON: " + *data);
    SIESTA_RETURN_IF_ERROR(read_choice(chunk, is_chat(path), true, out));
    out.body = std::move(chunk);
    ++out.chunks;
  }
  SIESTA_ASSIGN_OR_RETURN(std::optional<std::string> after, stream.next_data());
  if (after) return Internal("an event after [DONE]: " + *after);
  return out;
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

std::vector<std::string> names_matching(const std::string& dir, const std::regex& pattern) {
  std::vector<std::string> names;
  for (const std::string& name : list_dir(dir)) {
    if (std::regex_match(name, pattern)) names.push_back(name);
  }
  return names;
}

}  // namespace

std::vector<std::string> snapshot_files(const std::string& dir) {
  static const std::regex kSnapshot("siesta-[0-9a-f]{32}-0\\.snap");
  return names_matching(dir, kSnapshot);
}

std::vector<std::string> snapshot_segment_files(const std::string& dir) {
  static const std::regex kSegment("siesta-[0-9a-f]{32}-0(\\.[1-9][0-9]*)?\\.snap");
  return names_matching(dir, kSegment);
}

int64_t cache_counter(const json& status, const std::string& name, const std::string& reason) {
  if (!status.contains("cache") || !status["cache"].contains("counters")) return -1;
  const json& counters = status["cache"]["counters"];
  if (!counters.contains(name)) return -1;
  const json& value = reason.empty()                    ? counters[name]
                      : counters[name].contains(reason) ? counters[name][reason]
                                                        : json();
  return value.is_number_integer() ? value.get<int64_t>() : -1;
}

std::vector<std::pair<std::string, std::string>> bearer(const std::string& key) {
  if (key.empty()) return {};
  return {{"Authorization", "Bearer " + key}};
}

}  // namespace siesta::testing
