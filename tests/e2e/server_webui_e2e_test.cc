// The web page at / with the real binary: its files, their policy and --no-webui over HTTP; then
// in a real browser (headless Chromium through ChromeDriver): a message sent and its streamed
// answer (the same text a server that never offloads gives), the conversation's row turning
// to `disk` once the idle timer offloads it, a second message restored with its history
// (cached tokens shown); with --api-key, the page asks for the key and then works. A
// screenshot of each step is kept under the build's test-artifacts/webui/.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/openai_client.h"
#include "tests/e2e/server_args.h"
#include "tests/e2e/server_process.h"
#include "tests/e2e/web_browser.h"
#include "tests/support/temp_dir.h"

namespace siesta::testing {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::vector<std::string> kPageModel = {"--backend", "sim", "--model", "synthetic:small"};

std::string artifact(const std::string& name) {
  const std::string dir = std::string(SIESTA_TEST_ARTIFACTS) + "/webui";
  std::filesystem::create_directories(dir);
  return dir + "/" + name;
}

TEST(ServerWebUiE2eTest, ThePageAndItsFilesAreServedWithTheirPolicyAndWithoutTheKey) {
  auto server = start_or_die(with(kPageModel, {"--api-key", "page-test-key"}));
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/", "/webui.js", "/webui.css"}) {
    SCOPED_TRACE(path);
    httplib::Result got = server->client()->Get(path);  // no key
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, 200);
    EXPECT_THAT(got->get_header_value("Content-Security-Policy"), HasSubstr("default-src 'none'"));
    EXPECT_EQ(got->get_header_value("X-Content-Type-Options"), "nosniff");
  }
  httplib::Result page = server->client()->Get("/");
  ASSERT_TRUE(page);
  EXPECT_THAT(page->get_header_value("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(page->body, HasSubstr("<script src=\"/webui.js\""));
  httplib::Result status = server->client()->Get("/v1/status");  // data still needs the key
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 401);
  httplib::Result posted = server->client()->Post("/", "", "text/plain");
  ASSERT_TRUE(posted);
  EXPECT_EQ(posted->status, 401) << "only a GET of the page's files goes without the key";
}

TEST(ServerWebUiE2eTest, NoWebUiLeavesThePathToTheNotFoundAnswer) {
  auto server = start_or_die(with(kPageModel, {"--no-webui"}));
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/", "/webui.js", "/webui.css"}) {
    httplib::Result got = server->get(path);
    ASSERT_TRUE(got);
    EXPECT_EQ(got->status, 404) << path;
  }
}

// The page's last answer, once the stream has ended.
constexpr const char* kAnswerDone =
    "const a = document.getElementById('answer'); return !!a && a.dataset.done === '1';";

TEST(ServerWebUiE2eTest, InABrowserAConversationStreamsGoesToDiskAndComesBackWithItsHistory) {
  Result<std::unique_ptr<WebBrowser>> started = WebBrowser::start();
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  WebBrowser& browser = **started;
  TempDir temp;
  auto server = start_or_die(with(kPageModel, {"--cache-idle-seconds", "1", "--cache-ram-mib", "0",
                                               "--cache-disk-dir", temp.file("cache")}));
  auto reference = start_or_die(kPageModel);
  ASSERT_NE(server, nullptr);
  ASSERT_NE(reference, nullptr);

  ASSERT_TRUE(browser.navigate(server->base_url() + "/").ok());
  ASSERT_TRUE(browser
                  .wait_for("return document.getElementById('model').textContent !== '';",
                            "the status shown")
                  .ok());
  ASSERT_TRUE(browser.type("#message", "Tell me about the afternoon nap.").ok());
  ASSERT_TRUE(browser.click("#send").ok());
  Status answered = browser.wait_for(kAnswerDone, "the streamed answer");
  ASSERT_TRUE(answered.ok()) << answered.to_string();
  Result<json> first = browser.run("return document.getElementById('answer').textContent;");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  ASSERT_TRUE(browser.screenshot(artifact("1-answered.png")).ok());
  // The same request to a server that never offloads: the same text.
  json request = {
      {"messages", {{{"role", "user"}, {"content", "Tell me about the afternoon nap."}}}},
      {"max_tokens", 48}};
  Result<Completion> expected = complete(*reference, request, "/v1/chat/completions");
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  EXPECT_EQ(first->get<std::string>(), expected->text);

  // Idle for a second: the row turns to disk.
  Status on_disk = browser.wait_for(
      "return [...document.querySelectorAll('#conversations tbody tr')]"
      ".some(r => r.dataset.state === 'disk');",
      "a conversation on disk");
  ASSERT_TRUE(on_disk.ok()) << on_disk.to_string();
  ASSERT_TRUE(browser.screenshot(artifact("2-on-disk.png")).ok());

  // The second message restores it: its history is reused.
  ASSERT_TRUE(browser.type("#message", "And then?").ok());
  ASSERT_TRUE(browser.click("#send").ok());
  answered = browser.wait_for(kAnswerDone, "the second answer");
  ASSERT_TRUE(answered.ok()) << answered.to_string();
  Result<json> cached = browser.run("return document.getElementById('usage').dataset.cached;");
  ASSERT_TRUE(cached.ok());
  EXPECT_GT(std::stoi(cached->get<std::string>()), 0) << "the history was restored, not reread";
  Status restored = browser.wait_for(
      "return [...document.querySelectorAll('#conversations tbody tr')]"
      ".some(r => r.children[6].textContent === '1');",
      "a row counting its restore");
  EXPECT_TRUE(restored.ok()) << restored.to_string();
  ASSERT_TRUE(browser.screenshot(artifact("3-restored.png")).ok());
  Result<json> second = browser.run("return document.getElementById('answer').textContent;");
  ASSERT_TRUE(second.ok());
  request["messages"].push_back({{"role", "assistant"}, {"content", first->get<std::string>()}});
  request["messages"].push_back({{"role", "user"}, {"content", "And then?"}});
  expected = complete(*reference, request, "/v1/chat/completions");
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(second->get<std::string>(), expected->text);
}

TEST(ServerWebUiE2eTest, InABrowserThePageAsksForTheKeyAndSendsIt) {
  Result<std::unique_ptr<WebBrowser>> started = WebBrowser::start();
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  WebBrowser& browser = **started;
  auto server = start_or_die(with(kPageModel, {"--api-key", "page-test-key"}));
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(browser.navigate(server->base_url() + "/").ok());
  Status asked =
      browser.wait_for("return !document.getElementById('key-form').hidden;", "the key form");
  ASSERT_TRUE(asked.ok()) << asked.to_string();
  ASSERT_TRUE(browser.screenshot(artifact("4-asks-for-the-key.png")).ok());
  ASSERT_TRUE(browser.type("#api-key", "page-test-key").ok());
  ASSERT_TRUE(browser.click("#key-form button").ok());
  Status shown = browser.wait_for(
      "return document.getElementById('model').textContent !== '' && "
      "document.getElementById('key-form').hidden;",
      "the status read with the key");
  ASSERT_TRUE(shown.ok()) << shown.to_string();
  ASSERT_TRUE(browser.type("#message", "hello").ok());
  ASSERT_TRUE(browser.click("#send").ok());
  Status answered = browser.wait_for(kAnswerDone, "an answer with the key");
  ASSERT_TRUE(answered.ok()) << answered.to_string();
  Result<json> stored = browser.run(
      "return JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie;");
  ASSERT_TRUE(stored.ok());
  EXPECT_THAT(stored->get<std::string>(), ::testing::Not(HasSubstr("page-test-key")))
      << "the key is kept in the tab's memory only";
}

}  // namespace
}  // namespace siesta::testing
