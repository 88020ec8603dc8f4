// WebBrowser: headless Chromium driven through ChromeDriver's WebDriver protocol (W3C, JSON over
// HTTP on loopback), for the web page's e2e test. Debian's packages: /usr/bin/chromium and
// /usr/bin/chromedriver (scripts/install-deps installs both); a missing one is an error, as
// every dependency is.
//
// Synchronisation is by the page's own state: wait_for() evaluates a script in the page until
// it returns true or a deadline passes, pausing 50 ms between tries (the page refreshes its
// table once a second, and the server's idle timer runs on real time).
//
// Thread rule: one test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "core/base/status.h"

namespace siesta::testing {

class WebBrowser {
 public:
  // Starts ChromeDriver on a free loopback port and opens a headless Chromium session
  // (1280 x 900). Failure: NotFound when Chromium or ChromeDriver is not installed; Internal
  // with ChromeDriver's words when the session cannot start.
  static Result<std::unique_ptr<WebBrowser>> start();
  // Ends the session and stops ChromeDriver (and its Chromium).
  ~WebBrowser();
  WebBrowser(const WebBrowser&) = delete;
  WebBrowser& operator=(const WebBrowser&) = delete;

  Status navigate(const std::string& url);
  // Runs `script` (a function body: `return ...;`) in the page with `args` (a JSON array,
  // as arguments[0..]); its return value. Failure: Internal with the page's error.
  Result<nlohmann::json> run(const std::string& script,
                             const nlohmann::json& args = nlohmann::json::array());
  // Types `text` into the element `css` selects, or clicks it. Failure: NotFound when nothing
  // matches; Internal for WebDriver's errors.
  Status type(const std::string& css, const std::string& text);
  Status click(const std::string& css);
  // Runs `script` until it returns true, at most `deadline`. Failure: Internal naming `what`.
  Status wait_for(const std::string& script, const std::string& what,
                  std::chrono::milliseconds deadline = std::chrono::seconds(30));
  // Writes a PNG of the window to `path`.
  Status screenshot(const std::string& path);

 private:
  WebBrowser() = default;
  Result<nlohmann::json> call(const std::string& method, const std::string& path,
                              const nlohmann::json& body = nlohmann::json::object());
  Result<std::string> element(const std::string& css);

  pid_t driver_ = -1;
  int port_ = 0;
  std::string session_;
};

}  // namespace siesta::testing
