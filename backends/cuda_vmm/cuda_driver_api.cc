#include "backends/cuda_vmm/cuda_driver_api.h"

#include <dlfcn.h>

#include <string>
#include <utility>

namespace siesta::cuda {

Result<std::unique_ptr<DriverLibrary>> DriverLibrary::open(const std::string& path) {
  // RTLD_LOCAL: the driver's symbols must not satisfy anyone else's undefined references.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();  // NOLINT(concurrency-mt-unsafe): per-thread in glibc
    return NotFound("no CUDA driver: cannot load " + path + " (" +
                    (why != nullptr ? why : "unknown dlopen error") + ")");
  }
  std::unique_ptr<DriverLibrary> library(new DriverLibrary(handle, path));
  DriverApi& api = library->api_;
  // Each entry point is looked up under its ABI name (see the header on versioned names).
#define SIESTA_CUDA_RESOLVE_(name)                                                          \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(handle, SIESTA_CUDA_SYMBOL(name))); \
  if (api.name == nullptr) {                                                                \
    return NotFound("CUDA driver " + path + " lacks " SIESTA_CUDA_SYMBOL(name) +            \
                    std::string(" (driver older than CUDA ") +                              \
                    std::to_string(CUDA_VERSION / 1000) + "." +                             \
                    std::to_string(CUDA_VERSION % 1000 / 10) + "?)");                       \
  }
  SIESTA_CUDA_DRIVER_FUNCTIONS(SIESTA_CUDA_RESOLVE_)
#undef SIESTA_CUDA_RESOLVE_
  return library;
}

DriverLibrary::~DriverLibrary() { dlclose(handle_); }

Result<const DriverApi*> driver() {
  struct Loaded {
    std::unique_ptr<DriverLibrary> library;  // null when loading failed
    Status status;
  };
  // Loaded once and deliberately never destroyed (see the header).
  static const Loaded* const loaded = [] {
    auto* out = new Loaded;
    Result<std::unique_ptr<DriverLibrary>> library = DriverLibrary::open("libcuda.so.1");
    if (!library.ok()) {
      out->status = library.status();
      return out;
    }
    if (CUresult r = (*library)->api().cuInit(0); r != CUDA_SUCCESS) {
      out->status = status_from_cu((*library)->api(), r, "cuInit(0)");
      if (out->status.code() == StatusCode::kNotFound) {
        out->status = NotFound("no usable CUDA driver or device: " + out->status.message());
      }
      return out;  // the library closes again: nothing will call into it
    }
    out->library = std::move(library).value();
    return out;
  }();
  if (loaded->library == nullptr) return loaded->status;
  return &loaded->library->api();
}

StatusCode status_code_from_cu(CUresult result) {
  switch (result) {
    case CUDA_SUCCESS: return StatusCode::kOk;
    case CUDA_ERROR_OUT_OF_MEMORY: return StatusCode::kOutOfMemory;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE: return StatusCode::kNotFound;
    case CUDA_ERROR_NOT_SUPPORTED: return StatusCode::kUnsupported;
    default: return StatusCode::kDeviceError;
  }
}

namespace {

// Names for the codes siesta branches on, for when the library cannot name them itself (the
// toolkit's stub library, found first on a misconfigured library path, names nothing).
const char* fallback_name(CUresult result) {
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
      return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case CUDA_ERROR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
    default: return nullptr;
  }
}

}  // namespace

Status status_from_cu(const DriverApi& api, CUresult result, std::string_view call) {
  const StatusCode code = status_code_from_cu(result);
  if (code == StatusCode::kOk) return Status::Ok();
  // Both lookups fail for codes this driver does not know; say the number then.
  const char* name = nullptr;
  const char* text = nullptr;
  if (api.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
    name = fallback_name(result);
  }
  if (api.cuGetErrorString(result, &text) != CUDA_SUCCESS || text == nullptr) text = nullptr;
  std::string message(call);
  message += " failed: ";
  message += name != nullptr ? name : "CUresult " + std::to_string(static_cast<int>(result));
  message += ": ";
  message += text != nullptr ? text : "no description from the driver";
  return Status(code, std::move(message));
}

}  // namespace siesta::cuda
