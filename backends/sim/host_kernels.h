// HostKernels: the Kernels seam (compute/kernels.h) as plain C++ loops on the SimBackend's
// simulated device stream, so the reference engine and every offload test run without a GPU.
//
// Execution: every operation becomes one job queued with SimBackend::enqueue_work(), after
// everything queued before it (copies, zeroing, other kernels). So SimBackend::synchronize()
// waits for kernels, decommit() waits for them before it releases memory, and a kernel that
// touches released memory really faults (SIGSEGV on the PROT_NONE pages). Jobs bind raw
// addresses and return OK: a host kernel cannot fail except by faulting.
// While capturing, operations are appended to a list of closures bound to their raw
// addresses and nothing runs; replay() queues ONE job that runs the whole list in order.
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
// Numerics (deterministic: the same inputs give the same bits on every run; the CUDA kernels
// mirror these formulas and agree within the kernel tests' tolerances). Floats are f32 with
// IEEE semantics (no fast-math); "dot8" below is the fixed-order dot product:
//   dot8(a, b, n): eight partial sums s[j] = sum over k = j, j+8, j+16... (ascending) of
//     a[k]*b[k], for k < n - n%8; the tail k >= n - n%8 is then added to s[k%8] in ascending
//     order; result ((s0+s1)+(s2+s3)) + ((s4+s5)+(s6+s7)).
//   matmul     out[r] = dot8(w[r], x, cols).
//   rms_norm   ss = dot8(x, x, dim); inv = 1.0f / std::sqrt(ss / (float)dim + eps);
//              out[i] = (x[i] * inv) * weight[i].
//   add        inout[i] = inout[i] + x[i].
//   swiglu     out[i] = (g / (1.0f + std::exp(-g))) * up[i], g = gate[i].
//   rope_table for p < context, i < head_dim/2, in double then rounded to float:
//                inv_freq = std::pow((double)theta, -2.0 * (double)i / (double)head_dim)
//                a        = (float)((double)p * inv_freq)
//                table[(p * head_dim/2 + i) * 2 + 0] = (float)std::cos((double)a)
//                table[(p * head_dim/2 + i) * 2 + 1] = (float)std::sin((double)a)
//   rope       x0' = x0*c - x1*s, x1' = x0*s + x1*c (f32, each product rounded).
//   kv_store   f32: the floats. f16: half_float::half_from_float (round to nearest even,
//              backends/sim/half_float.h). int8, per block of kKvInt8Block values:
//              m = max |x| (f32); scale = m / 127.0f; if scale == 0 every q = 0, else
//              q = clamp(std::lround(x / scale), -127, 127) (x / scale an f32 division;
//              lround rounds half away from zero). Decoding: x = (float)q * scale;
//              f16: half_float::float_from_half.
//   attention  per head h: s_t = dot8(q_h, K_t,h, head_dim) * (1.0f / std::sqrt((float)
//              head_dim)); m = max_t s_t; e_t = std::exp(s_t - m) (f32, stored in scores);
//              sum = e_0 + e_1 + ... in ascending t (f32); p_t = e_t / sum;
//              out_h[d] = sum over ascending t of p_t * V_t,h[d] (f32, starting from 0).
//   recurrent  g = 1.0f / (1.0f + std::exp(-gate[i]));
//              state[i] = g * state[i] + (1.0f - g) * std::tanh(input[i]).
//   argmax     ascending scan, strictly greater replaces: ties keep the lowest index; a NaN
//              never wins (unless at `first` and nothing compares greater).
//
// Thread rule: one thread at a time per object (compute/kernels.h). The SimBackend must outlive
// this object and every job it queued.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/sim/sim_backend.h"
#include "compute/kernels.h"

namespace siesta {

class HostKernels final : public Kernels {
 public:
  // Never fails today; a Result so that callers treat both backends alike.
  static Result<std::unique_ptr<HostKernels>> create(SimBackend& backend);

  std::string name() const override { return "host"; }

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
                   DeviceAddress scores, DeviceAddress out) override;
  Status recurrent_update(DeviceAddress input, DeviceAddress gate, uint32_t n,
                          DeviceAddress state) override;
  Status argmax(DeviceAddress logits, uint32_t first, uint32_t last, DeviceAddress out) override;

  Status upload(std::span<const std::byte> source, DeviceAddress destination) override;
  Status download(DeviceAddress source, std::span<std::byte> destination) override;
  Status synchronize() override;

  Status begin_capture() override;
  Result<std::unique_ptr<KernelGraph>> end_capture() override;
  // Failure: FailedPrecondition while capturing; InvalidArgument for a graph another object
  // recorded.
  Status replay(const KernelGraph& graph) override;

  // One bound operation: raw addresses and sizes captured by value, run on the stream.
  using Op = std::function<void()>;

 private:
  explicit HostKernels(SimBackend& backend) : backend_(backend) {}

  // The common tail of every operation: `checked` is the host-side validation. Not OK: the
  // error is returned (and kept for end_capture() while capturing), nothing runs. OK: the
  // op is recorded while capturing, otherwise queued on the stream.
  Status launch(const Status& checked, Op op);
  Status refuse_while_capturing(const char* what) const;

  SimBackend& backend_;
  bool capturing_ = false;
  std::vector<Op> recorded_;
  Status capture_error_;  // first error an operation returned while recording
};

}  // namespace siesta
