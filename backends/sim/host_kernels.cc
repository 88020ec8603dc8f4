#include "backends/sim/host_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "backends/sim/host_kernel_loops.h"
#include "compute/half_float.h"

namespace siesta {
namespace {

// ---- Host-side argument checks ----

Status require(bool ok, const char* op, const std::string& what) {
  if (ok) return Status::Ok();
  return InvalidArgument(std::string(op) + ": " + what);
}

Status check_nonzero(const char* op, const char* name, uint32_t value) {
  return require(value != 0, op, std::string(name) + " must not be 0");
}

// A device operand: non-null and aligned to `alignment` bytes.
Status check_address(const char* op, const char* name, DeviceAddress address,
                     size_t alignment = 4) {
  if (address == 0) return InvalidArgument(std::string(op) + ": " + name + " is a null address");
  return require(address % alignment == 0, op,
                 std::string(name) + " is not " + std::to_string(alignment) + "-byte aligned");
}

bool known_kv_type(KvType type) {
  return type == KvType::kF32 || type == KvType::kF16 || type == KvType::kInt8;
}

Status check_kv_layout(const char* op, KvType type, uint64_t dim) {
  if (!known_kv_type(type)) {
    return InvalidArgument(std::string(op) + ": unknown KvType " +
                           std::to_string(static_cast<int>(type)));
  }
  if (type == KvType::kInt8 && dim % kKvInt8Block != 0) {
    return InvalidArgument(std::string(op) + ": int8 KV rows need a dim that is a multiple of " +
                           std::to_string(kKvInt8Block) + ", got " + std::to_string(dim));
  }
  return Status::Ok();
}

size_t kv_alignment(KvType type) { return type == KvType::kF16 ? 2 : 4; }

bool overlaps(DeviceAddress a, size_t a_bytes, DeviceAddress b, size_t b_bytes) {
  return a < b + b_bytes && b < a + a_bytes;
}

// ---- The kernels' bodies (run on the stream; raw pointers into committed memory) ----

// The simulator's device addresses are host addresses.
float* f32(DeviceAddress address) {
  return reinterpret_cast<float*>(address);  // NOLINT(performance-no-int-to-ptr)
}
std::byte* bytes(DeviceAddress address) {
  return reinterpret_cast<std::byte*>(address);  // NOLINT(performance-no-int-to-ptr)
}
StepParams step(DeviceAddress params) {
  StepParams p;
  std::memcpy(&p, bytes(params), sizeof p);
  return p;
}

// Eight partial sums as two 4-float vectors (GCC/Clang vector extension; 16 bytes is an SSE
// register, so no ABI questions): element-wise IEEE f32 arithmetic, exactly the eight scalar
// partial sums of the documented order, but vector instructions at any optimisation level.
typedef float F32x4 __attribute__((vector_size(16)));

struct Sum8 {
  F32x4 lo = {};  // partial sums 0..3
  F32x4 hi = {};  // partial sums 4..7
  // Adds `v` to partial sum j. (Clang, unlike GCC, binds no reference to a vector element.)
  void add(size_t j, float v) {
    if (j < 4) {
      lo[j] += v;
    } else {
      hi[j - 4] += v;
    }
  }
  float total() const {
    return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
  }
};

F32x4 load4(const float* p) {
  F32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The fixed-order dot product of compute/kernel_contract.h ("dot8").
float dot8(const float* a, const float* b, size_t n) {
  Sum8 s;
  const size_t whole = n - n % 8;
  for (size_t k = 0; k < whole; k += 8) {
    s.lo += load4(a + k) * load4(b + k);
    s.hi += load4(a + k + 4) * load4(b + k + 4);
  }
  for (size_t k = whole; k < n; ++k) s.add(k % 8, a[k] * b[k]);
  return s.total();
}

// out[r] = dot8(w[r], x, cols), four rows at a time: each x block is loaded once per four
// rows and the rows' sums are independent chains. Every row keeps its own eight partial sums
// in dot8's order, so the bits are exactly dot8's.
void matmul_rows(const float* w, const float* x, uint32_t rows, size_t cols, float* out) {
  const size_t whole = cols - cols % 8;
  uint32_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const float* row[4] = {w + size_t{r} * cols, w + size_t{r + 1} * cols, w + size_t{r + 2} * cols,
                           w + size_t{r + 3} * cols};
    Sum8 s[4];
    for (size_t k = 0; k < whole; k += 8) {
      const F32x4 x_lo = load4(x + k);
      const F32x4 x_hi = load4(x + k + 4);
      for (int i = 0; i < 4; ++i) {
        s[i].lo += load4(row[i] + k) * x_lo;
        s[i].hi += load4(row[i] + k + 4) * x_hi;
      }
    }
    for (int i = 0; i < 4; ++i) {
      for (size_t k = whole; k < cols; ++k) s[i].add(k % 8, row[i][k] * x[k]);
      out[r + i] = s[i].total();
    }
  }
  for (; r < rows; ++r) out[r] = dot8(w + size_t{r} * cols, x, cols);
}

void encode_row(KvType type, const float* x, uint32_t dim, std::byte* row) {
  switch (type) {
    case KvType::kF32: std::memcpy(row, x, size_t{dim} * 4); return;
    case KvType::kF16:
      for (uint32_t i = 0; i < dim; ++i) {
        const uint16_t h = half_float::half_from_float(x[i]);
        std::memcpy(row + size_t{i} * 2, &h, 2);
      }
      return;
    case KvType::kInt8: {
      std::byte* scales = row + dim;
      for (uint32_t b = 0; b < dim / kKvInt8Block; ++b) {
        const float* block = x + size_t{b} * kKvInt8Block;
        float m = 0.0f;
        for (uint32_t i = 0; i < kKvInt8Block; ++i) m = std::max(m, std::fabs(block[i]));
        const float scale = m / 127.0f;
        for (uint32_t i = 0; i < kKvInt8Block; ++i) {
          long q = scale == 0.0f ? 0 : std::lround(block[i] / scale);
          q = std::clamp(q, -127L, 127L);
          row[size_t{b} * kKvInt8Block + i] = static_cast<std::byte>(static_cast<int8_t>(q));
        }
        std::memcpy(scales + size_t{b} * 4, &scale, 4);
      }
      return;
    }
  }
}

void rms_norm_row(const float* in, const float* w, uint32_t dim, float eps, float* o) {
  const float inv = 1.0f / std::sqrt(dot8(in, in, dim) / static_cast<float>(dim) + eps);
  for (uint32_t i = 0; i < dim; ++i) o[i] = (in[i] * inv) * w[i];
}

void rope_row(float* v, uint32_t heads, uint32_t head_dim, const float* table, size_t position) {
  const uint32_t half = head_dim / 2;
  const float* cs = table + position * half * 2;
  for (uint32_t h = 0; h < heads; ++h) {
    float* x = v + size_t{h} * head_dim;
    for (size_t i = 0; i < half; ++i) {
      const float c = cs[2 * i];
      const float s = cs[2 * i + 1];
      const float x0 = x[2 * i];
      const float x1 = x[2 * i + 1];
      x[2 * i] = x0 * c - x1 * s;
      x[2 * i + 1] = x0 * s + x1 * c;
    }
  }
}

void recurrent_step(const float* in, const float* gt, uint32_t first, uint32_t last, float* st) {
  for (uint32_t i = first; i < last; ++i) {
    const float g = 1.0f / (1.0f + std::exp(-gt[i]));
    st[i] = g * st[i] + (1.0f - g) * std::tanh(in[i]);
  }
}

// [0, n) cut into `parts` ranges of whole multiples of `grain` (the last takes the rest).
struct Split {
  uint32_t size;   // of each range but the last
  uint32_t parts;  // ranges
};
Split split(uint32_t n, unsigned threads, uint32_t grain) {
  const uint32_t wanted = std::max(1u, 4 * threads);
  uint32_t size = (n + wanted - 1) / wanted;
  size = std::max(grain, (size + grain - 1) / grain * grain);
  return {size, (n + size - 1) / size};
}

// A recorded graph: the bound operations, shared with any replay job still queued so the
// graph may be destroyed before its replays have run.
class HostGraph final : public KernelGraph {
 public:
  HostGraph(const void* owner, std::vector<HostKernels::Op> ops)
      : owner_(owner), ops_(std::make_shared<const std::vector<HostKernels::Op>>(std::move(ops))) {}
  size_t operation_count() const override { return ops_->size(); }
  const void* owner() const { return owner_; }
  std::shared_ptr<const std::vector<HostKernels::Op>> ops() const { return ops_; }

 private:
  const void* owner_;
  std::shared_ptr<const std::vector<HostKernels::Op>> ops_;
};

}  // namespace

Result<std::unique_ptr<HostKernels>> HostKernels::create(SimBackend& backend,
                                                         HostKernelsOptions options) {
  const unsigned threads =
      options.threads != 0 ? options.threads : HostThreadPool::default_threads();
  return std::unique_ptr<HostKernels>(new HostKernels(backend, threads));
}

Status HostKernels::launch(const Status& checked, Op op) {
  if (!checked.ok()) {
    if (capturing_ && capture_error_.ok()) capture_error_ = checked;
    return checked;
  }
  if (capturing_) {
    recorded_.push_back(std::move(op));
    return Status::Ok();
  }
  Result<CopyTicket> ticket = backend_.enqueue_work([op = std::move(op)] {
    op();
    return Status::Ok();
  });
  return ticket.status();
}

Status HostKernels::refuse_while_capturing(const char* what) const {
  if (!capturing_) return Status::Ok();
  return FailedPrecondition(std::string(what) + " is refused while capturing a graph");
}

// ---- Operations ----

Status HostKernels::embed(DeviceAddress table, uint32_t dim, DeviceAddress params,
                          DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("embed", "dim", dim));
    SIESTA_RETURN_IF_ERROR(check_address("embed", "table", table));
    SIESTA_RETURN_IF_ERROR(check_address("embed", "params", params));
    return check_address("embed", "out", out);
  }();
  return launch(checked, [=] {
    const size_t token = static_cast<size_t>(static_cast<int64_t>(step(params).token));
    std::memcpy(f32(out), f32(table) + token * dim, size_t{dim} * 4);
  });
}

Status HostKernels::rms_norm(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                             DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("rms_norm", "dim", dim));
    SIESTA_RETURN_IF_ERROR(
        require(std::isfinite(eps) && eps >= 0.0f, "rms_norm", "eps must be finite and >= 0"));
    SIESTA_RETURN_IF_ERROR(check_address("rms_norm", "x", x));
    SIESTA_RETURN_IF_ERROR(check_address("rms_norm", "weight", weight));
    return check_address("rms_norm", "out", out);
  }();
  return launch(checked, [=] { rms_norm_row(f32(x), f32(weight), dim, eps, f32(out)); });
}

Status HostKernels::matmul(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                           DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("matmul", "rows", rows));
    SIESTA_RETURN_IF_ERROR(check_nonzero("matmul", "cols", cols));
    SIESTA_RETURN_IF_ERROR(check_address("matmul", "w", w));
    SIESTA_RETURN_IF_ERROR(check_address("matmul", "x", x));
    SIESTA_RETURN_IF_ERROR(check_address("matmul", "out", out));
    return require(!overlaps(out, size_t{rows} * 4, x, size_t{cols} * 4), "matmul",
                   "out overlaps x");
  }();
  return launch(checked, [=] { matmul_rows(f32(w), f32(x), rows, cols, f32(out)); });
}

Status HostKernels::add(DeviceAddress x, uint32_t n, DeviceAddress inout) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("add", "n", n));
    SIESTA_RETURN_IF_ERROR(check_address("add", "x", x));
    return check_address("add", "inout", inout);
  }();
  return launch(checked, [=] {
    const float* in = f32(x);
    float* io = f32(inout);
    for (uint32_t i = 0; i < n; ++i) io[i] = io[i] + in[i];
  });
}

Status HostKernels::swiglu(DeviceAddress gate, DeviceAddress up, uint32_t n, DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("swiglu", "n", n));
    SIESTA_RETURN_IF_ERROR(check_address("swiglu", "gate", gate));
    SIESTA_RETURN_IF_ERROR(check_address("swiglu", "up", up));
    return check_address("swiglu", "out", out);
  }();
  return launch(checked, [=] {
    const float* g = f32(gate);
    const float* u = f32(up);
    float* o = f32(out);
    for (uint32_t i = 0; i < n; ++i) o[i] = (g[i] / (1.0f + std::exp(-g[i]))) * u[i];
  });
}

Status HostKernels::rope_table(DeviceAddress table, uint32_t context, uint32_t head_dim,
                               float theta) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("rope_table", "context", context));
    SIESTA_RETURN_IF_ERROR(check_nonzero("rope_table", "head_dim", head_dim));
    SIESTA_RETURN_IF_ERROR(require(head_dim % 2 == 0, "rope_table", "head_dim must be even"));
    SIESTA_RETURN_IF_ERROR(require(std::isfinite(theta) && theta > 0.0f, "rope_table",
                                   "theta must be finite and > 0"));
    return check_address("rope_table", "table", table);
  }();
  return launch(checked, [=] {
    float* t = f32(table);
    const uint32_t half = head_dim / 2;
    for (uint32_t p = 0; p < context; ++p) {
      for (uint32_t i = 0; i < half; ++i) {
        const double inv_freq =
            std::pow(static_cast<double>(theta),
                     -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
        const float a = static_cast<float>(static_cast<double>(p) * inv_freq);
        const size_t at = (size_t{p} * half + i) * 2;
        t[at] = static_cast<float>(std::cos(static_cast<double>(a)));
        t[at + 1] = static_cast<float>(std::sin(static_cast<double>(a)));
      }
    }
  });
}

Status HostKernels::rope(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
                         DeviceAddress params) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("rope", "heads", heads));
    SIESTA_RETURN_IF_ERROR(check_nonzero("rope", "head_dim", head_dim));
    SIESTA_RETURN_IF_ERROR(require(head_dim % 2 == 0, "rope", "head_dim must be even"));
    SIESTA_RETURN_IF_ERROR(check_address("rope", "vec", vec));
    SIESTA_RETURN_IF_ERROR(check_address("rope", "table", table));
    return check_address("rope", "params", params);
  }();
  return launch(checked, [=] {
    const size_t position = static_cast<size_t>(static_cast<int64_t>(step(params).position));
    rope_row(f32(vec), heads, head_dim, f32(table), position);
  });
}

Status HostKernels::kv_store(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                             DeviceAddress k_cache, DeviceAddress v_cache, DeviceAddress params) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("kv_store", "dim", dim));
    SIESTA_RETURN_IF_ERROR(check_kv_layout("kv_store", type, dim));
    SIESTA_RETURN_IF_ERROR(check_address("kv_store", "k", k));
    SIESTA_RETURN_IF_ERROR(check_address("kv_store", "v", v));
    SIESTA_RETURN_IF_ERROR(check_address("kv_store", "k_cache", k_cache, kv_alignment(type)));
    SIESTA_RETURN_IF_ERROR(check_address("kv_store", "v_cache", v_cache, kv_alignment(type)));
    return check_address("kv_store", "params", params);
  }();
  return launch(checked, [=] {
    const size_t row =
        static_cast<size_t>(static_cast<int64_t>(step(params).position)) * kv_row_bytes(type, dim);
    encode_row(type, f32(k), dim, bytes(k_cache) + row);
    encode_row(type, f32(v), dim, bytes(v_cache) + row);
  });
}

namespace {
Status check_attention(const char* op, DeviceAddress q, DeviceAddress k_cache,
                       DeviceAddress v_cache, KvType type, uint32_t heads, uint32_t head_dim,
                       uint32_t context, uint32_t rows, DeviceAddress out) {
  SIESTA_RETURN_IF_ERROR(check_nonzero(op, "heads", heads));
  SIESTA_RETURN_IF_ERROR(check_nonzero(op, "head_dim", head_dim));
  SIESTA_RETURN_IF_ERROR(check_nonzero(op, "context", context));
  const uint64_t dim = uint64_t{heads} * head_dim;
  SIESTA_RETURN_IF_ERROR(require(dim <= UINT32_MAX, op, "heads * head_dim overflows"));
  SIESTA_RETURN_IF_ERROR(check_kv_layout(op, type, dim));
  SIESTA_RETURN_IF_ERROR(check_address(op, "q", q));
  SIESTA_RETURN_IF_ERROR(check_address(op, "k_cache", k_cache, kv_alignment(type)));
  SIESTA_RETURN_IF_ERROR(check_address(op, "v_cache", v_cache, kv_alignment(type)));
  SIESTA_RETURN_IF_ERROR(check_address(op, "out", out));
  return require(!overlaps(out, dim * 4 * rows, q, dim * 4 * rows), op, "out overlaps q");
}
}  // namespace

Status HostKernels::attention(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache,
                              KvType type, uint32_t heads, uint32_t head_dim, uint32_t context,
                              DeviceAddress params, DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(
        check_attention("attention", q, k_cache, v_cache, type, heads, head_dim, context, 1, out));
    return check_address("attention", "params", params);
  }();
  return launch(checked, [=] {
    AttentionRows rows{f32(q),
                       bytes(k_cache),
                       bytes(v_cache),
                       type,
                       heads,
                       head_dim,
                       static_cast<uint32_t>(step(params).position),
                       f32(out)};
    for (uint32_t h = 0; h < heads; ++h) host_loops().attend(rows, h, 0, 1);
  });
}

Status HostKernels::recurrent_update(DeviceAddress input, DeviceAddress gate, uint32_t n,
                                     DeviceAddress state) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("recurrent_update", "n", n));
    SIESTA_RETURN_IF_ERROR(check_address("recurrent_update", "input", input));
    SIESTA_RETURN_IF_ERROR(check_address("recurrent_update", "gate", gate));
    return check_address("recurrent_update", "state", state);
  }();
  return launch(checked, [=] { recurrent_step(f32(input), f32(gate), 0, n, f32(state)); });
}

Status HostKernels::argmax(DeviceAddress logits, uint32_t first, uint32_t last, DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(
        require(first <= last, "argmax",
                "first (" + std::to_string(first) + ") > last (" + std::to_string(last) + ")"));
    SIESTA_RETURN_IF_ERROR(require(last <= INT32_MAX, "argmax", "last does not fit an int32"));
    SIESTA_RETURN_IF_ERROR(check_address("argmax", "logits", logits));
    return check_address("argmax", "out", out);
  }();
  return launch(checked, [=] {
    const float* l = f32(logits);
    uint32_t best = first;
    for (uint32_t i = first + 1; i <= last && i > first; ++i) {
      if (l[i] > l[best]) best = i;
    }
    const int32_t index = static_cast<int32_t>(best);
    std::memcpy(bytes(out), &index, 4);
  });
}

// ---- Block operations ----

Status HostKernels::embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens,
                                uint32_t count, DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("embed_block", "dim", dim));
    SIESTA_RETURN_IF_ERROR(check_nonzero("embed_block", "count", count));
    SIESTA_RETURN_IF_ERROR(check_address("embed_block", "table", table));
    SIESTA_RETURN_IF_ERROR(check_address("embed_block", "tokens", tokens));
    return check_address("embed_block", "out", out);
  }();
  return launch(checked, [=] {
    for (uint32_t i = 0; i < count; ++i) {
      int32_t token;
      std::memcpy(&token, bytes(tokens) + size_t{i} * 4, 4);
      std::memcpy(f32(out) + size_t{i} * dim,
                  f32(table) + static_cast<size_t>(static_cast<int64_t>(token)) * dim,
                  size_t{dim} * 4);
    }
  });
}

Status HostKernels::rms_norm_block(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                                   uint32_t count, DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("rms_norm_block", "dim", dim));
    SIESTA_RETURN_IF_ERROR(check_nonzero("rms_norm_block", "count", count));
    SIESTA_RETURN_IF_ERROR(require(std::isfinite(eps) && eps >= 0.0f, "rms_norm_block",
                                   "eps must be finite and >= 0"));
    SIESTA_RETURN_IF_ERROR(check_address("rms_norm_block", "x", x));
    SIESTA_RETURN_IF_ERROR(check_address("rms_norm_block", "weight", weight));
    return check_address("rms_norm_block", "out", out);
  }();
  return launch(checked, [=] {
    for (uint32_t i = 0; i < count; ++i) {
      rms_norm_row(f32(x) + size_t{i} * dim, f32(weight), dim, eps, f32(out) + size_t{i} * dim);
    }
  });
}

Status HostKernels::matmul_block(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                                 uint32_t count, DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("matmul_block", "rows", rows));
    SIESTA_RETURN_IF_ERROR(check_nonzero("matmul_block", "cols", cols));
    SIESTA_RETURN_IF_ERROR(check_nonzero("matmul_block", "count", count));
    SIESTA_RETURN_IF_ERROR(check_address("matmul_block", "w", w));
    SIESTA_RETURN_IF_ERROR(check_address("matmul_block", "x", x));
    SIESTA_RETURN_IF_ERROR(check_address("matmul_block", "out", out));
    return require(!overlaps(out, uint64_t{count} * rows * 4, x, uint64_t{count} * cols * 4),
                   "matmul_block", "out overlaps x");
  }();
  // Tasks are ranges of rows of w: each reads its rows once for the whole block.
  const Split tasks = split(rows, pool_->threads(), 8);
  return launch(checked, [=, pool = pool_] {
    pool->run(tasks.parts, [&](size_t task) {
      const uint32_t first = static_cast<uint32_t>(task) * tasks.size;
      const uint32_t n = std::min(rows - first, tasks.size);
      host_loops().dot8_tile(f32(w) + size_t{first} * cols, cols, n, f32(x), cols, count, cols,
                             f32(out) + first, rows);
    });
  });
}

Status HostKernels::rope_block(DeviceAddress vec, uint32_t heads, uint32_t head_dim,
                               DeviceAddress table, uint32_t position, uint32_t count) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("rope_block", "heads", heads));
    SIESTA_RETURN_IF_ERROR(check_nonzero("rope_block", "head_dim", head_dim));
    SIESTA_RETURN_IF_ERROR(check_nonzero("rope_block", "count", count));
    SIESTA_RETURN_IF_ERROR(require(head_dim % 2 == 0, "rope_block", "head_dim must be even"));
    SIESTA_RETURN_IF_ERROR(check_address("rope_block", "vec", vec));
    return check_address("rope_block", "table", table);
  }();
  return launch(checked, [=] {
    const size_t dim = size_t{heads} * head_dim;
    for (uint32_t i = 0; i < count; ++i) {
      rope_row(f32(vec) + i * dim, heads, head_dim, f32(table), size_t{position} + i);
    }
  });
}

Status HostKernels::kv_store_block(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                                   DeviceAddress k_cache, DeviceAddress v_cache, uint32_t position,
                                   uint32_t count) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("kv_store_block", "dim", dim));
    SIESTA_RETURN_IF_ERROR(check_nonzero("kv_store_block", "count", count));
    SIESTA_RETURN_IF_ERROR(check_kv_layout("kv_store_block", type, dim));
    SIESTA_RETURN_IF_ERROR(check_address("kv_store_block", "k", k));
    SIESTA_RETURN_IF_ERROR(check_address("kv_store_block", "v", v));
    SIESTA_RETURN_IF_ERROR(check_address("kv_store_block", "k_cache", k_cache, kv_alignment(type)));
    return check_address("kv_store_block", "v_cache", v_cache, kv_alignment(type));
  }();
  return launch(checked, [=] {
    const size_t row_bytes = kv_row_bytes(type, dim);
    for (uint32_t i = 0; i < count; ++i) {
      const size_t row = (size_t{position} + i) * row_bytes;
      encode_row(type, f32(k) + size_t{i} * dim, dim, bytes(k_cache) + row);
      encode_row(type, f32(v) + size_t{i} * dim, dim, bytes(v_cache) + row);
    }
  });
}

Status HostKernels::attention_block(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache,
                                    KvType type, uint32_t heads, uint32_t head_dim,
                                    uint32_t context, uint32_t position, uint32_t count,
                                    DeviceAddress scratch, DeviceAddress out) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("attention_block", "count", count));
    SIESTA_RETURN_IF_ERROR(check_address("attention_block", "scratch", scratch));
    return check_attention("attention_block", q, k_cache, v_cache, type, heads, head_dim, context,
                           count, out);
  }();
  // Tasks: a head and a range of queries, enough of them to keep every thread busy. Each
  // (query, head) is one task's alone, so the split changes nothing in the bits.
  return launch(checked, [=, pool = pool_] {
    const unsigned threads = pool->threads();
    const uint32_t per_head = std::min(count, std::max(1u, (2 * threads + heads - 1) / heads));
    const uint32_t queries = (count + per_head - 1) / per_head;
    const uint32_t ranges = (count + queries - 1) / queries;
    const AttentionRows rows{f32(q), bytes(k_cache), bytes(v_cache), type,
                             heads,  head_dim,       position,       f32(out)};
    pool->run(size_t{heads} * ranges, [&](size_t task) {
      const uint32_t h = static_cast<uint32_t>(task % heads);
      const uint32_t first = static_cast<uint32_t>(task / heads) * queries;
      host_loops().attend(rows, h, first, std::min(count, first + queries));
    });
  });
}

Status HostKernels::recurrent_scan(DeviceAddress input, DeviceAddress gate, uint32_t n,
                                   uint32_t count, DeviceAddress state, DeviceAddress states) {
  Status checked = [&]() -> Status {
    SIESTA_RETURN_IF_ERROR(check_nonzero("recurrent_scan", "n", n));
    SIESTA_RETURN_IF_ERROR(check_nonzero("recurrent_scan", "count", count));
    SIESTA_RETURN_IF_ERROR(check_address("recurrent_scan", "input", input));
    SIESTA_RETURN_IF_ERROR(check_address("recurrent_scan", "gate", gate));
    SIESTA_RETURN_IF_ERROR(check_address("recurrent_scan", "state", state));
    return check_address("recurrent_scan", "states", states);
  }();
  // Tasks are ranges of state elements; each runs its elements through every row in order.
  const Split tasks = split(n, pool_->threads(), 16);
  return launch(checked, [=, pool = pool_] {
    pool->run(tasks.parts, [&](size_t task) {
      const uint32_t first = static_cast<uint32_t>(task) * tasks.size;
      const uint32_t last = std::min(n, first + tasks.size);
      float* st = f32(state);
      for (uint32_t i = 0; i < count; ++i) {
        recurrent_step(f32(input) + size_t{i} * n, f32(gate) + size_t{i} * n, first, last, st);
        std::memcpy(f32(states) + size_t{i} * n + first, st + first, size_t{last - first} * 4);
      }
    });
  });
}

// ---- Transfers ----

Status HostKernels::upload(std::span<const std::byte> source, DeviceAddress destination) {
  SIESTA_RETURN_IF_ERROR(refuse_while_capturing("upload"));
  if (source.empty()) return Status::Ok();
  if (destination == 0) return InvalidArgument("upload: destination is a null address");
  auto copy = std::make_shared<std::vector<std::byte>>(source.begin(), source.end());
  Result<CopyTicket> ticket = backend_.enqueue_work([copy, destination] {
    std::memcpy(bytes(destination), copy->data(), copy->size());
    return Status::Ok();
  });
  return ticket.status();
}

Status HostKernels::download(DeviceAddress source, std::span<std::byte> destination) {
  SIESTA_RETURN_IF_ERROR(refuse_while_capturing("download"));
  if (!destination.empty() && source == 0) {
    return InvalidArgument("download: source is a null address");
  }
  // An empty copy still waits, as the contract promises "waits for all enqueued work".
  Result<CopyTicket> ticket = backend_.enqueue_work([source, destination] {
    if (!destination.empty()) std::memcpy(destination.data(), bytes(source), destination.size());
    return Status::Ok();
  });
  if (!ticket.ok()) return ticket.status();
  return backend_.wait_work(*ticket);
}

Status HostKernels::synchronize() {
  SIESTA_RETURN_IF_ERROR(refuse_while_capturing("synchronize"));
  return backend_.synchronize();
}

namespace {

// An empty job on the work stream: every job before it has run once it has.
class WorkStreamFence final : public KernelFence {
 public:
  WorkStreamFence(SimBackend& backend, CopyTicket ticket) : backend_(backend), ticket_(ticket) {}
  Status wait() override { return backend_.wait_work(ticket_); }

 private:
  SimBackend& backend_;
  const CopyTicket ticket_;
};

}  // namespace

Result<std::unique_ptr<KernelFence>> HostKernels::fence() {
  SIESTA_RETURN_IF_ERROR(refuse_while_capturing("fence"));
  SIESTA_ASSIGN_OR_RETURN(const CopyTicket ticket,
                          backend_.enqueue_work([] { return Status::Ok(); }));
  return std::unique_ptr<KernelFence>(std::make_unique<WorkStreamFence>(backend_, ticket));
}

// ---- Graphs ----

Status HostKernels::begin_capture() {
  if (capturing_) return FailedPrecondition("begin_capture: already capturing");
  capturing_ = true;
  recorded_.clear();
  capture_error_ = Status::Ok();
  return Status::Ok();
}

Result<std::unique_ptr<KernelGraph>> HostKernels::end_capture() {
  if (!capturing_) return FailedPrecondition("end_capture: not capturing");
  capturing_ = false;
  std::vector<Op> ops = std::move(recorded_);
  recorded_.clear();
  if (!capture_error_.ok()) {
    return capture_error_.with_context("end_capture: an operation failed while recording");
  }
  return std::unique_ptr<KernelGraph>(new HostGraph(this, std::move(ops)));
}

Status HostKernels::replay(const KernelGraph& graph) {
  SIESTA_RETURN_IF_ERROR(refuse_while_capturing("replay"));
  const auto* host_graph = dynamic_cast<const HostGraph*>(&graph);
  if (host_graph == nullptr || host_graph->owner() != this) {
    return InvalidArgument("replay: the graph was not recorded by this HostKernels");
  }
  Result<CopyTicket> ticket = backend_.enqueue_work([ops = host_graph->ops()] {
    for (const Op& op : *ops) op();
    return Status::Ok();
  });
  return ticket.status();
}

}  // namespace siesta
