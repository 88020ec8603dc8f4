#include "server/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>
#include <cctype>
#include <iterator>
#include <string>

#include "server/api_error.h"
#include "server/request_head.h"
#include "server/webui_routes.h"

namespace siesta::server {
namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

Digest sha256(std::string_view text) {
  Digest digest{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), digest.data());
  return digest;
}

void refuse(httplib::Response& response, std::string message, std::string code) {
  ApiError error;
  error.http_status = 401;
  error.type = "authentication_error";
  error.message = std::move(message);
  error.code = std::move(code);
  response.set_header("WWW-Authenticate", "Bearer");
  set_api_error(response, error);
}

}  // namespace

bool api_key_matches(std::string_view presented, std::string_view expected) {
  // Equal-length digests: CRYPTO_memcmp's time depends on neither key's bytes nor length
  // (hashing takes time linear in the presented length, which the client already knows).
  const Digest a = sha256(presented);
  const Digest b = sha256(expected);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

bool authorize(const httplib::Request& request, httplib::Response& response,
               const ServerConfig& config) {
  if (config.api_key.empty()) return true;
  if (request.path == kUnauthenticatedPath) return true;
  if (config.webui && (request.method == "GET" || request.method == "HEAD") &&
      is_webui_path(request.path)) {
    return true;  // constant files; every request the page makes carries the key
  }
  // The headers' whole values, from the map itself: get_header_value() returns a C string,
  // which would end a value at an embedded NUL ("Bearer KEY\0junk" would pass as the key).
  const auto [bearer_first, bearer_last] = request.headers.equal_range("Authorization");
  const auto [plain_first, plain_last] = request.headers.equal_range("X-Api-Key");
  if (bearer_first == bearer_last && plain_first == plain_last) {
    refuse(response,
           "missing API key: send the header \"Authorization: Bearer <key>\" or \"X-Api-Key: "
           "<key>\" (the key is --api-key or " +
               std::string(kApiKeyEnvironmentVariable) + ")",
           "missing_api_key");
    return false;
  }
  // Two headers of one kind: which one a proxy or a log shows is anyone's guess.
  const bool single =
      std::distance(bearer_first, bearer_last) <= 1 && std::distance(plain_first, plain_last) <= 1;
  bool matches = true;
  if (bearer_first != bearer_last) {
    const std::string& value = bearer_first->second;
    constexpr std::string_view kScheme = "Bearer ";
    std::string_view presented;
    const bool bearer =
        value.size() >= kScheme.size() &&
        equals_ignoring_case(std::string_view(value).substr(0, kScheme.size()), kScheme);
    if (bearer) presented = std::string_view(value).substr(kScheme.size());
    // Compared even for a wrong scheme, so the answer takes the same time either way.
    matches = api_key_matches(presented, config.api_key) && bearer;
  }
  // Anthropic's and llama-server's clients send the key as X-Api-Key; when both headers are
  // sent, both must hold the key.
  if (plain_first != plain_last) {
    matches = api_key_matches(plain_first->second, config.api_key) && matches;
  }
  if (!matches || !single) {
    refuse(response,
           "invalid API key: send \"Authorization: Bearer <key>\" or \"X-Api-Key: <key>\" "
           "with the server's key",
           "invalid_api_key");
    return false;
  }
  return true;
}

}  // namespace siesta::server
