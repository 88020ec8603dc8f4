#include "server/random_id.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/snapshot/chunk_sealer.h"

namespace siesta::server {

std::string random_id(std::string_view prefix, size_t bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::vector<uint8_t> random(bytes);
  if (Status made = random_bytes(random); !made.ok()) {
    (void)std::fprintf(stderr, "siesta-server: no random bytes for an id: %s\n",
                       made.to_string().c_str());
    std::abort();
  }
  std::string id(prefix);
  for (uint8_t b : random) {
    id += kHex[b >> 4];
    id += kHex[b & 0xf];
  }
  return id;
}

}  // namespace siesta::server
