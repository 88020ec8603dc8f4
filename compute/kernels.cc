#include "compute/kernels.h"

#include <string>

#include "core/base/log_text.h"

namespace siesta {

std::string_view kv_type_name(KvType type) {
  switch (type) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kInt8: return "int8";
  }
  return "unknown";
}

Result<KvType> parse_kv_type(std::string_view text) {
  for (KvType type : {KvType::kF32, KvType::kF16, KvType::kInt8}) {
    if (text == kv_type_name(type)) return type;
  }
  // Quoted: the text may come from a command line or a request, and a message is one line.
  return InvalidArgument("KV type " + quote_for_log(text) +
                         " is not one of the accepted values: f32, f16, int8");
}

}  // namespace siesta
