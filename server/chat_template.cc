#include "server/chat_template.h"

namespace siesta::server {

std::string_view chat_role_name(ChatRole role) {
  switch (role) {
    case ChatRole::kSystem: return "system";
    case ChatRole::kUser: return "user";
    case ChatRole::kAssistant: return "assistant";
  }
  return "user";
}

std::optional<ChatRole> parse_chat_role(std::string_view name) {
  for (ChatRole role : {ChatRole::kSystem, ChatRole::kUser, ChatRole::kAssistant}) {
    if (name == chat_role_name(role)) return role;
  }
  return std::nullopt;
}

namespace {

void append_header(std::string& prompt, ChatRole role) {
  prompt.append("<|").append(chat_role_name(role)).append("|>\n");
}

}  // namespace

std::string render_chat_prompt(const std::vector<ChatMessage>& messages) {
  std::string prompt;
  for (const ChatMessage& message : messages) {
    append_header(prompt, message.role);
    prompt.append(message.content).append("\n");
  }
  append_header(prompt, ChatRole::kAssistant);
  return prompt;
}

}  // namespace siesta::server
