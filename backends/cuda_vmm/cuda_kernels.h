// CudaKernels: the Kernels seam (compute/kernels.h) as CUDA kernels.
//
// Every operation is one kernel launch on one non-blocking stream that this object creates on
// the device's primary context: the context the CUDA runtime uses and the one CudaVmmBackend
// maps memory in, so kernels reach every committed DeviceAddress directly, and the backend's
// synchronize() / decommit() (cuCtxSynchronize) also wait for these kernels. Graphs are CUDA
// graphs captured from that stream (thread-local capture mode) and replayed on it; the
// addresses they were captured with stay valid across decommit + commit at the same address.
//
// Plain C++ header (no CUDA includes): the engine and the server include it. The runtime is
// linked statically and loads libcuda only when first used, so binaries that contain this
// class start on machines without a GPU or driver; there create() fails, saying why.
//
// Numerics: deterministic (every reduction has a fixed shape and order, no atomics), and
// within the kernel tests' tolerances of the reference (tests/gpu/cuda_kernels_test.cc).
// The formulas are HostKernels' (compute/kernel_contract.h), built without fused
// multiply-adds: matmul (single and block) uses the host's "dot8" order and attention the
// contract's tiles, chunks, dot8, sum8 and exp_f32, so both equal the host's bit for bit;
// embed, add, rope, kv_store (f16 round to nearest even, int8 per compute/kernels.h) and
// argmax are exact; rms_norm's sum uses a block tree and swiglu/recurrent use CUDA's
// expf/tanhf, so those differ from the host by a few ulp. Every block operation runs the
// scalar steps of its single-token kernel, so a prompt gives the same bits however it is cut
// into blocks, on this backend as on the host.
// Not checked on the device (as on the host): StepParams.token must be inside the embedding
// table; a position >= context is clamped by the single-token attention (the host would read
// past the cache). Attention needs head_dim <= 256 here (InvalidArgument otherwise).
//
// Thread rule: one thread at a time per object (compute/kernels.h); any thread may be that
// thread: every call first selects the object's device for the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"

namespace siesta {

class CudaKernels final : public Kernels {
 public:
  // Selects device `device_ordinal` on its primary context and creates the stream and the
  // pinned upload buffer.
  // Failure (nothing is left allocated): Unsupported when there is no usable CUDA driver or
  // no such device (the message says which, e.g. "CUDA kernels unavailable: no CUDA driver
  // ..."), InvalidArgument for a negative ordinal, OutOfMemory when the pinned buffer cannot
  // be had, DeviceError for any other runtime failure.
  static Result<std::unique_ptr<Kernels>> create(int device_ordinal = 0);

  // Waits for the stream's work, then frees the stream, event and pinned buffer. Graphs this
  // object made may outlive it but can no longer be replayed.
  ~CudaKernels() override;
  CudaKernels(const CudaKernels&) = delete;
  CudaKernels& operator=(const CudaKernels&) = delete;

  std::string name() const override;  // "cuda"
  // 128: on the H200 a block of 64 leaves most of the GPU idle (the matmul and attention grids
  // are too small): 128 reads synthetic:medium's prompt twice as fast at 1k tokens of history
  // (docs/PERFORMANCE.md), and a block still takes well under 0.1 s.
  uint32_t preferred_prefill_block() const override { return 128; }

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
  Status replay(const KernelGraph& graph) override;

 private:
  struct Impl;
  explicit CudaKernels(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace siesta
