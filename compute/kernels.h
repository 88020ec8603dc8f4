// Kernels: the compute seam. The reference engine (engine/) computes its model only through
// this interface; each backend folder implements it beside its MemoryBackend:
//   HostKernels (backends/sim)      plain C++ loops, run on the SimBackend's device stream
//   CudaKernels (backends/cuda_vmm) CUDA kernels on a stream of the device's primary context
// It lives in compute/, below the backends and beside core/memory (whose DeviceAddress it
// computes on), because a backend may not include the engine; it names operations (matmul,
// attention...), never a model.
//
// Execution model, the same on both backends:
//   - Every operation is enqueued, in call order, on one in-order stream, as a CUDA launch
//     is. That stream is not ordered with the MemoryBackend's staging copies: only
//     MemoryBackend::synchronize() of the backend the kernels were made for (or download()
//     here) waits for it, so "pending device work is synchronized before any copy and any
//     decommit" must be done, not assumed, for kernels too.
//   - Operands are DeviceAddress values of committed memory: f32 activations and weights
//     unless said otherwise, row-major. Nothing is bounds-checked on the device: a kernel
//     that touches released memory faults (on the simulator a real SIGSEGV), which is what
//     the offload tests rely on to catch a restore at the wrong address. Run-time values are
//     the caller's to keep in range: StepParams.token < the embedding table's rows and
//     position < the context the caches and the scores scratch were sized for
//     (engine::Session checks both before every step).
//   - The exact arithmetic (summation orders, the rope angle's rounding, the softmax) is
//     written down once, in compute/kernel_contract.h; CudaKernels follows it where the
//     hardware allows and states its tolerances.
//   - Values that change from token to token (the token id, the position) are read at run
//     time from a StepParams block in device memory, never baked into a launch: that is what
//     lets one recorded graph serve every token (decode). The block operations (prefill) take
//     their position and token count as values instead: a block is launched, not replayed.
//   - Between begin_capture() and end_capture() operations are recorded, not run; the graph
//     replays them with the same raw addresses (a CUDA graph on the GPU, a list of bound calls
//     on the simulator). upload/download/synchronize are refused while capturing.
//   - Numerics are deterministic on each backend: the same inputs give the same bits on every
//     run (fixed reduction orders, no atomics), and a block operation's rows have the bits of
//     the single-token operation. The two backends agree within the tolerances the kernel
//     tests state (matmul and attention bit for bit), not bit for bit overall.
//
// Errors: an operation returns InvalidArgument for arguments it can check on the host (zero
// sizes, dim not a multiple of the int8 block, first > last...), FailedPrecondition for
// misuse (capture state), DeviceError for a launch the device refused; errors of work already
// enqueued surface at the next download() or synchronize().
//
// Thread rule: one thread at a time per Kernels object (the engine thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "compute/kernel_math.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"

namespace siesta {

// How the KV cache stores one row (one position of one layer's K or V).
//   kF32   dim floats
//   kF16   dim IEEE binary16 values, rounded to nearest even
//   kInt8  dim int8 values q, then dim / kKvInt8Block f32 scales; x ~= q * scale of its block,
//          scale = max|x| / 127.0f over the block in f32 (0 for an all-zero block), q =
//          round-half-away(x / scale), an f32 division (not a multiplication by 1/scale),
//          clamped to [-127, 127]
enum class KvType : uint8_t { kF32, kF16, kInt8 };
inline constexpr uint32_t kKvInt8Block = 32;

std::string_view kv_type_name(KvType type);  // "f32", "f16", "int8"
// Failure: InvalidArgument naming the accepted values.
Result<KvType> parse_kv_type(std::string_view text);

// Bytes of one KV row of `dim` values. REQUIRES for kInt8: dim % kKvInt8Block == 0.
constexpr size_t kv_row_bytes(KvType type, uint32_t dim) {
  switch (type) {
    case KvType::kF32: return size_t{dim} * 4;
    case KvType::kF16: return size_t{dim} * 2;
    case KvType::kInt8: return size_t{dim} + size_t{dim / kKvInt8Block} * 4;
  }
  return 0;
}

// Bytes of attention_block's scratch for `count` queries: a softmax state per query, head and
// chunk of kernel_math::kAttentionChunk positions (m, l and head_dim sums), so a backend may
// read the chunks of a long history in parallel and fold them in the contract's order.
constexpr uint64_t attention_scratch_bytes(uint32_t count, uint32_t heads, uint32_t head_dim,
                                           uint32_t context) {
  const uint64_t chunks =
      (uint64_t{context} + kernel_math::kAttentionChunk - 1) / kernel_math::kAttentionChunk;
  return uint64_t{count} * heads * chunks * (uint64_t{head_dim} + 2) * 4;
}

// The per-token values a recorded step reads at run time. Lives in device memory (8 bytes,
// 4-byte aligned); the engine uploads it before each replay.
struct StepParams {
  int32_t token = 0;     // the token being fed
  int32_t position = 0;  // its position: KV row written, attention over rows [0, position]
};

// A recorded sequence of operations, bound to the raw addresses it was recorded with.
// Replayable any number of times; only by the Kernels that recorded it.
class KernelGraph {
 public:
  virtual ~KernelGraph() = default;
  virtual size_t operation_count() const = 0;
};

// A point in a Kernels object's queue (Kernels::fence()): wait() returns once every operation
// enqueued before the fence was made has run. What another thread enqueues after it is not
// waited for: a background save waits for its own session's work, not for another session's
// decode step queued meanwhile.
// Thread rule: wait() from any thread, at any time, however often (it never calls the Kernels
// object); destroyed before the Kernels that made it.
class KernelFence {
 public:
  virtual ~KernelFence() = default;
  // Failure: the device's error (DeviceError); an error of an earlier operation may be
  // reported here or only by the Kernels object's own calls.
  virtual Status wait() = 0;
};

class Kernels {
 public:
  virtual ~Kernels() = default;

  virtual std::string name() const = 0;  // "host", "cuda"

  // The prefill block length (tokens) this backend's block operations want: past it, a block
  // costs about as much per token as a longer one, and shorter ones leave the device idle.
  // The engine reads prompts in blocks of this many tokens unless configured otherwise
  // (engine::ModelConfig::prefill_block); any length gives the same bits.
  virtual uint32_t preferred_prefill_block() const = 0;

  // ---- Operations (enqueued; recorded while capturing) ----

  // out[0..dim) = table[params.token][0..dim). table: [vocab][dim].
  virtual Status embed(DeviceAddress table, uint32_t dim, DeviceAddress params,
                       DeviceAddress out) = 0;

  // out[i] = x[i] * weight[i] / sqrt(mean(x^2) + eps). out may equal x.
  virtual Status rms_norm(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                          DeviceAddress out) = 0;

  // out[r] = sum_c w[r][c] * x[c] for r < rows. w: [rows][cols]. out must not overlap x.
  virtual Status matmul(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                        DeviceAddress out) = 0;

  // inout[i] += x[i].
  virtual Status add(DeviceAddress x, uint32_t n, DeviceAddress inout) = 0;

  // out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may equal gate or up.
  virtual Status swiglu(DeviceAddress gate, DeviceAddress up, uint32_t n, DeviceAddress out) = 0;

  // Fills the rotary table for positions [0, context): table[p][i] = {cos a, sin a},
  // a = p * theta^(-2i / head_dim), i < head_dim / 2 (2 * context * head_dim/2 floats).
  // REQUIRES: head_dim even.
  virtual Status rope_table(DeviceAddress table, uint32_t context, uint32_t head_dim,
                            float theta) = 0;

  // Rotates vec (heads * head_dim values) in place at params.position: within each head,
  // the pair (x[2i], x[2i+1]) becomes (x0 cos a - x1 sin a, x0 sin a + x1 cos a) with
  // {cos a, sin a} = table[position][i].
  virtual Status rope(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
                      DeviceAddress params) = 0;

  // Stores k and v (dim f32 each) as row params.position of k_cache and v_cache, converted to
  // `type` (kv_row_bytes(type, dim) bytes per row).
  virtual Status kv_store(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                          DeviceAddress k_cache, DeviceAddress v_cache, DeviceAddress params) = 0;

  // Causal attention of one query over cache rows [0, params.position]:
  // for each head h, s_t = dot8(q_h, K_t,h) / sqrt(head_dim), p = softmax(s), out_h = sum_t p_t
  // V_t,h, with K and V rows decoded from `type`, in the tiles and chunks of
  // compute/kernel_contract.h. context: the rows the caches hold (positions must be below
  // it). out must not overlap q.
  virtual Status attention(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache,
                           KvType type, uint32_t heads, uint32_t head_dim, uint32_t context,
                           DeviceAddress params, DeviceAddress out) = 0;

  // The recurrent layer's update, per element: g = sigmoid(gate[i]),
  // state[i] = g * state[i] + (1 - g) * tanh(input[i]).
  virtual Status recurrent_update(DeviceAddress input, DeviceAddress gate, uint32_t n,
                                  DeviceAddress state) = 0;

  // Greedy sampling: *out (int32) = the index in [first, last] of the largest logit, the
  // lowest index on ties. REQUIRES: first <= last.
  virtual Status argmax(DeviceAddress logits, uint32_t first, uint32_t last, DeviceAddress out) = 0;

  // ---- Block operations (the prefill) ----
  // A block is `count` consecutive tokens at positions [position, position + count); row i of
  // every block operand (row-major, `width` values a row) belongs to position + i. Row i of
  // every result has exactly the bits the single-token operation gives for that token
  // (compute/kernel_contract.h), whatever `count` is, so a prompt gives the same bytes however
  // it is cut into blocks. position and count are values, not run-time reads: a graph that
  // records a block operation replays that block. add() and swiglu() serve blocks as they
  // are (n = count * width). REQUIRES: count > 0 (else InvalidArgument), position + count
  // <= the context the caches were sized for (not checked on the device).

  // out[i] = table[tokens[i]], tokens: count int32 values in device memory.
  virtual Status embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens,
                             uint32_t count, DeviceAddress out) = 0;
  // rms_norm of every row. out may equal x.
  virtual Status rms_norm_block(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                                uint32_t count, DeviceAddress out) = 0;
  // out[i][r] = dot8(w[r], x[i], cols): x [count][cols], out [count][rows], not overlapping.
  virtual Status matmul_block(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                              uint32_t count, DeviceAddress out) = 0;
  // Row i rotated at position + i.
  virtual Status rope_block(DeviceAddress vec, uint32_t heads, uint32_t head_dim,
                            DeviceAddress table, uint32_t position, uint32_t count) = 0;
  // Rows i of k and v stored as cache rows position + i.
  virtual Status kv_store_block(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                                DeviceAddress k_cache, DeviceAddress v_cache, uint32_t position,
                                uint32_t count) = 0;
  // Query row i attends to cache rows [0, position + i] (the block's own rows must be stored
  // first). scratch: attention_scratch_bytes(count, heads, head_dim, context) bytes of device
  // memory the kernels may use (4-byte aligned). out must not overlap q.
  virtual Status attention_block(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache,
                                 KvType type, uint32_t heads, uint32_t head_dim, uint32_t context,
                                 uint32_t position, uint32_t count, DeviceAddress scratch,
                                 DeviceAddress out) = 0;
  // The recurrent update applied for row 0, 1, ... count-1 of input and gate ([count][n]) in
  // turn; states[i] ([count][n]) receives the state after row i, and `state` ends as the last.
  virtual Status recurrent_scan(DeviceAddress input, DeviceAddress gate, uint32_t n, uint32_t count,
                                DeviceAddress state, DeviceAddress states) = 0;

  // ---- Transfers (refused while capturing) ----

  // Enqueues a copy of `source` to device address `destination`; `source` may be reused as
  // soon as this returns.
  virtual Status upload(std::span<const std::byte> source, DeviceAddress destination) = 0;

  // Waits for all enqueued work, then copies `destination.size()` bytes from `source`.
  // Failure: the copy's error, and earlier kernel errors where the backend reports them
  // there (CUDA does; synchronize() always does). An empty destination copies nothing.
  virtual Status download(DeviceAddress source, std::span<std::byte> destination) = 0;

  // Waits for all enqueued work; returns its first error.
  virtual Status synchronize() = 0;

  // A fence after every operation enqueued so far (KernelFence). Costs no wait.
  // Failure: FailedPrecondition while capturing; the device's error.
  virtual Result<std::unique_ptr<KernelFence>> fence() = 0;

  // ---- Graphs ----

  // Starts recording. REQUIRES: not capturing (else FailedPrecondition).
  virtual Status begin_capture() = 0;
  // Stops recording and returns the graph. Failure: FailedPrecondition when not capturing;
  // the first error an operation returned while recording, if any (capture is then over).
  virtual Result<std::unique_ptr<KernelGraph>> end_capture() = 0;
  // Enqueues the graph's operations, bound to their recorded addresses.
  // REQUIRES: `graph` came from this object's end_capture() (else InvalidArgument); not
  // capturing (else FailedPrecondition).
  virtual Status replay(const KernelGraph& graph) = 0;
};

}  // namespace siesta
