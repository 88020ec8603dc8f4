// The chat template's text and the property prefix reuse depends on: a conversation continued
// with the model's answer extends the previous prompt byte for byte.
#include "server/chat_template.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace siesta::server {
namespace {

TEST(ChatTemplateTest, RendersEachMessageThenTheAssistantHeader) {
  const std::vector<ChatMessage> messages = {{ChatRole::kSystem, "Be brief."},
                                             {ChatRole::kUser, "Hi"}};
  EXPECT_EQ(render_chat_prompt(messages), "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\n");
}

TEST(ChatTemplateTest, NoMessagesIsTheAssistantHeaderAlone) {
  EXPECT_EQ(render_chat_prompt({}), "<|assistant|>\n");
}

TEST(ChatTemplateTest, RolesRoundTripAndUnknownRolesAreRefused) {
  for (ChatRole role : {ChatRole::kSystem, ChatRole::kUser, ChatRole::kAssistant}) {
    EXPECT_EQ(parse_chat_role(chat_role_name(role)), role);
  }
  EXPECT_FALSE(parse_chat_role("tool"));
  EXPECT_FALSE(parse_chat_role("User"));
  EXPECT_FALSE(parse_chat_role(""));
}

// render(m + [assistant: answer] + rest) starts with render(m) + answer, for answers and
// follow-ups of every shape (empty, with newlines, with the template's own markers).
TEST(ChatTemplateTest, ContinuedConversationExtendsThePreviousPromptAndAnswer) {
  const std::vector<std::vector<ChatMessage>> conversations = {
      {{ChatRole::kUser, "Hi"}},
      {{ChatRole::kSystem, ""}, {ChatRole::kUser, "a\nb"}},
      {{ChatRole::kUser, "x"}, {ChatRole::kAssistant, "y"}, {ChatRole::kUser, "z"}},
  };
  const std::vector<std::string> answers = {"", "Hello!", "two\nlines", "<|user|>\nodd", " "};
  for (const auto& messages : conversations) {
    const std::string before = render_chat_prompt(messages);
    for (const std::string& answer : answers) {
      std::vector<ChatMessage> next = messages;
      next.push_back({ChatRole::kAssistant, answer});
      next.push_back({ChatRole::kUser, "and then?"});
      const std::string after = render_chat_prompt(next);
      EXPECT_EQ(after.substr(0, before.size() + answer.size()), before + answer)
          << "answer " << answer;
      EXPECT_GT(after.size(), before.size() + answer.size());
    }
  }
}

}  // namespace
}  // namespace siesta::server
