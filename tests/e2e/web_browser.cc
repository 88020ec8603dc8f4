#include "tests/e2e/web_browser.h"

#include <fcntl.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <thread>
#include <vector>

extern char** environ;

namespace siesta::testing {
namespace {

constexpr const char* kChromium = "/usr/bin/chromium";
constexpr const char* kChromeDriver = "/usr/bin/chromedriver";
// WebDriver's key for an element reference in JSON.
constexpr const char* kElementKey = "element-6066-11e4-a52e-4f735466cecf";

using Clock = std::chrono::steady_clock;

}  // namespace

Result<std::unique_ptr<WebBrowser>> WebBrowser::start() {
  for (const char* binary : {kChromium, kChromeDriver}) {
    if (::access(binary, X_OK) != 0) {
      return NotFound(std::string(binary) +
                      " is missing: scripts/install-deps installs chromium and chromium-driver");
    }
  }
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return Internal("pipe2 failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, ends[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> argv_strings = {kChromeDriver, "--port=0"};
  std::vector<char*> argv;
  argv.reserve(argv_strings.size() + 1);
  for (std::string& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::unique_ptr<WebBrowser> browser(new WebBrowser());
  const int spawned =
      ::posix_spawn(&browser->driver_, kChromeDriver, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(ends[1]);
  if (spawned != 0) {
    ::close(ends[0]);
    browser->driver_ = -1;
    return Internal("posix_spawn chromedriver failed");
  }
  // "ChromeDriver was started successfully on port N."
  std::string said;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  static const std::regex started("started successfully on port ([0-9]+)");
  std::smatch match;
  while (!std::regex_search(said, match, started)) {
    pollfd entry{ends[0], POLLIN, 0};
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    char buffer[512];
    ssize_t got = 0;
    if (left <= 0 || ::poll(&entry, 1, static_cast<int>(left)) <= 0 ||
        (got = ::read(ends[0], buffer, sizeof buffer)) <= 0) {
      ::close(ends[0]);
      return Internal("chromedriver did not start: " + said);
    }
    said.append(buffer, static_cast<size_t>(got));
  }
  ::close(ends[0]);
  browser->port_ = std::stoi(match[1].str());
  const nlohmann::json options = {{"binary", kChromium},
                                  {"args",
                                   {"--headless=new", "--no-sandbox", "--disable-gpu",
                                    "--disable-dev-shm-usage", "--window-size=1280,900"}}};
  SIESTA_ASSIGN_OR_RETURN(
      nlohmann::json session,
      browser->call("POST", "/session",
                    {{"capabilities", {{"alwaysMatch", {{"goog:chromeOptions", options}}}}}}));
  browser->session_ = session.value("sessionId", "");
  if (browser->session_.empty()) return Internal("no WebDriver session: " + session.dump());
  return browser;
}

WebBrowser::~WebBrowser() {
  try {
    if (!session_.empty()) (void)call("DELETE", "/session/" + session_);
  } catch (...) {
    // The session ends with ChromeDriver below anyway; a destructor does not throw.
  }
  if (driver_ > 0) {
    ::kill(driver_, SIGTERM);
    int status = 0;
    ::waitpid(driver_, &status, 0);
  }
}

Result<nlohmann::json> WebBrowser::call(const std::string& method, const std::string& path,
                                        const nlohmann::json& body) {
  httplib::Client client("127.0.0.1", port_);
  client.set_read_timeout(std::chrono::seconds(60));
  httplib::Result answer = method == "GET" ? client.Get(path)
                           : method == "DELETE"
                               ? client.Delete(path)
                               : client.Post(path, body.dump(), "application/json");
  if (!answer) return Internal("WebDriver " + method + " " + path + ": no answer");
  nlohmann::json parsed = nlohmann::json::parse(answer->body, nullptr, false);
  if (parsed.is_discarded() || !parsed.contains("value")) {
    return Internal("WebDriver " + method + " " + path + ": " + answer->body);
  }
  if (answer->status != 200) {
    return Internal("WebDriver " + method + " " + path + ": " + parsed["value"].dump());
  }
  if (path == "/session") return parsed["value"];  // {"sessionId", "capabilities"}
  return parsed["value"];
}

Status WebBrowser::navigate(const std::string& url) {
  return call("POST", "/session/" + session_ + "/url", {{"url", url}}).status();
}

Result<nlohmann::json> WebBrowser::run(const std::string& script, const nlohmann::json& args) {
  return call("POST", "/session/" + session_ + "/execute/sync",
              {{"script", script}, {"args", args}});
}

Result<std::string> WebBrowser::element(const std::string& css) {
  Result<nlohmann::json> found = call("POST", "/session/" + session_ + "/element",
                                      {{"using", "css selector"}, {"value", css}});
  if (!found.ok()) return NotFound("no element " + css + ": " + found.status().message());
  return found->value(kElementKey, "");
}

Status WebBrowser::type(const std::string& css, const std::string& text) {
  SIESTA_ASSIGN_OR_RETURN(std::string id, element(css));
  return call("POST", "/session/" + session_ + "/element/" + id + "/value", {{"text", text}})
      .status();
}

Status WebBrowser::click(const std::string& css) {
  SIESTA_ASSIGN_OR_RETURN(std::string id, element(css));
  return call("POST", "/session/" + session_ + "/element/" + id + "/click").status();
}

Status WebBrowser::wait_for(const std::string& script, const std::string& what,
                            std::chrono::milliseconds deadline) {
  const auto until = Clock::now() + deadline;
  std::string last;
  while (Clock::now() < until) {
    Result<nlohmann::json> value = run(script);
    if (value.ok() && value->is_boolean() && value->get<bool>()) return Status::Ok();
    last = value.ok() ? value->dump() : value.status().message();
    // The page's table refreshes each second; the server's idle timer runs on real time.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Internal("waited " + std::to_string(deadline.count()) + " ms for " + what +
                  " (last: " + last + ")");
}

Status WebBrowser::screenshot(const std::string& path) {
  SIESTA_ASSIGN_OR_RETURN(nlohmann::json value,
                          call("GET", "/session/" + session_ + "/screenshot"));
  const std::string base64 = value.get<std::string>();
  std::vector<unsigned char> png(base64.size() / 4 * 3 + 3);
  const int decoded =
      EVP_DecodeBlock(png.data(), reinterpret_cast<const unsigned char*>(base64.data()),
                      static_cast<int>(base64.size()));
  if (decoded < 0) return Internal("the screenshot is not base64");
  size_t length = static_cast<size_t>(decoded);
  for (size_t i = base64.size(); i > 0 && base64[i - 1] == '='; --i) --length;  // padding
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(length));
  return out.good() ? Status::Ok() : Internal("cannot write " + path);
}

}  // namespace siesta::testing
