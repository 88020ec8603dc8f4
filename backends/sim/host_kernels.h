// HostKernels: the Kernels seam (compute/kernels.h) as plain C++ loops on the SimBackend's
// work stream, so the reference engine and every offload test run without a GPU.
//
// Execution: every operation, upload and download becomes one job queued with
// SimBackend::enqueue_work(), after the kernels queued before it; like CudaKernels' stream, the
// work stream is not ordered with the backend's staging copies. So SimBackend::synchronize()
// waits for kernels, decommit() waits for them before it releases memory, a kernel that
// touches released memory really faults (SIGSEGV on the PROT_NONE pages), and with the
// simulator's hazards on (SimHazards) a kernel runs only once something waits for it: a copy
// that does not synchronize first sees the bytes from before the kernel. Jobs bind raw
// addresses and return OK: a host kernel cannot fail except by faulting.
// While capturing, operations are appended to a list of closures bound to their raw
// addresses and nothing runs; replay() queues ONE job that runs the whole list in order.
//
// Block operations (the prefill) split their independent outputs -- matmul rows, attention
// heads and query ranges, recurrent state elements -- over a HostThreadPool owned by this
// object: the job on the work stream is one of its threads. Each output value is computed by
// one task in the contract's order, so the bits do not depend on the thread count (the tests
// compare 1 thread with several). Per-token operations (decode) run on the stream thread alone.
//
// Checks on the host (InvalidArgument, nothing queued or recorded): zero sizes, a null or
// misaligned f32 operand (4 bytes) or StepParams block (4 bytes), a KV cache misaligned for
// its type (f16: 2 bytes, f32 and int8: 4 bytes), head_dim odd (rope_table, rope), a row
// dim = heads * head_dim not a multiple of kKvInt8Block for int8, an unknown KvType, eps
// negative or not finite, theta not finite or <= 0, first > last, matmul's out overlapping x,
// attention's out overlapping q. Run-time values (StepParams.token and .position) are NOT
// checked: as on the GPU, a token outside the table or a position >= context reads or writes
// outside the operands (the engine must keep them in range).
//
// Transfers: an empty upload/download does nothing (download still waits for the stream).
// upload copies `source` into a private buffer at once, then queues the memcpy.
//
// Numerics: exactly compute/kernel_contract.h (the formulas and summation orders), with the
// inner loops of host_kernel_loops.h.
//
// Thread rule: one thread at a time per object (compute/kernels.h). The SimBackend must outlive
// this object and every job it queued.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/sim/host_thread_pool.h"
#include "backends/sim/sim_backend.h"
#include "compute/kernels.h"

namespace siesta {

struct HostKernelsOptions {
  unsigned threads = 0;  // of the block operations' pool, the stream's thread included; 0:
                         // HostThreadPool::default_threads()
};

class HostKernels final : public Kernels {
 public:
  // Never fails today; a Result so that callers treat both backends alike.
  static Result<std::unique_ptr<HostKernels>> create(SimBackend& backend,
                                                     HostKernelsOptions options = {});

  std::string name() const override { return "host"; }
  // 64: a block of synthetic:small at 32k tokens of history then takes about 0.1 s on two
  // cores (docs/PERFORMANCE.md), so the engine's cancel check between blocks stays prompt.
  uint32_t preferred_prefill_block() const override { return 64; }

  Status embed(DeviceAddress table, uint32_t dim, DeviceAddress params, DeviceAddress out) override;
  Status rms_norm(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                  DeviceAddress out) override;
  Status matmul(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                DeviceAddress out) override;
  Status add(DeviceAddress x, uint32_t n, DeviceAddress inout) override;
  Status swiglu(DeviceAddress gate, DeviceAddress up, uint32_t n, DeviceAddress out) override;
  Status rope_table(DeviceAddress table, uint32_t context, uint32_t head_dim, float theta) override;
  Status rope(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
              DeviceAddress params) override;
  Status kv_store(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                  DeviceAddress k_cache, DeviceAddress v_cache, DeviceAddress params) override;
  Status attention(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache, KvType type,
                   uint32_t heads, uint32_t head_dim, uint32_t context, DeviceAddress params,
                   DeviceAddress out) override;
  Status recurrent_update(DeviceAddress input, DeviceAddress gate, uint32_t n,
                          DeviceAddress state) override;
  Status argmax(DeviceAddress logits, uint32_t first, uint32_t last, DeviceAddress out) override;

  Status embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens, uint32_t count,
                     DeviceAddress out) override;
  Status rms_norm_block(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                        uint32_t count, DeviceAddress out) override;
  Status matmul_block(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                      uint32_t count, DeviceAddress out) override;
  Status rope_block(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
                    uint32_t position, uint32_t count) override;
  Status kv_store_block(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                        DeviceAddress k_cache, DeviceAddress v_cache, uint32_t position,
                        uint32_t count) override;
  Status attention_block(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache, KvType type,
                         uint32_t heads, uint32_t head_dim, uint32_t context, uint32_t position,
                         uint32_t count, DeviceAddress scratch, DeviceAddress out) override;
  Status recurrent_scan(DeviceAddress input, DeviceAddress gate, uint32_t n, uint32_t count,
                        DeviceAddress state, DeviceAddress states) override;

  Status upload(std::span<const std::byte> source, DeviceAddress destination) override;
  Status download(DeviceAddress source, std::span<std::byte> destination) override;
  Status synchronize() override;
  Result<std::unique_ptr<KernelFence>> fence() override;

  Status begin_capture() override;
  Result<std::unique_ptr<KernelGraph>> end_capture() override;
  // Failure: FailedPrecondition while capturing; InvalidArgument for a graph another object
  // recorded.
  Status replay(const KernelGraph& graph) override;

  // One bound operation: raw addresses and sizes captured by value, run on the stream.
  using Op = std::function<void()>;

  unsigned threads() const { return pool_->threads(); }

 private:
  HostKernels(SimBackend& backend, unsigned threads)
      : backend_(backend), pool_(std::make_shared<HostThreadPool>(threads)) {}

  // The common tail of every operation: `checked` is the host-side validation. Not OK: the
  // error is returned (and kept for end_capture() while capturing), nothing runs. OK: the
  // op is recorded while capturing, otherwise queued on the stream.
  Status launch(const Status& checked, Op op);
  Status refuse_while_capturing(const char* what) const;

  SimBackend& backend_;
  // Shared with the queued jobs that use it, so that it outlives them.
  std::shared_ptr<HostThreadPool> pool_;
  bool capturing_ = false;
  std::vector<Op> recorded_;
  Status capture_error_;  // first error an operation returned while recording
};

}  // namespace siesta
