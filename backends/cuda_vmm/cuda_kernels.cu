// CudaKernels: host side. Checks every argument it can before anything reaches the device
// (a kernel that faults poisons the whole primary context, the VMM backend's included),
// launches the kernels of cuda_kernel_ops.cu on one stream, and records/replays CUDA graphs.
//
// Uploads go through two pinned buffers owned here, used in turn: the caller's bytes are
// copied into one, an asynchronous copy on the stream takes them from there, and an event
// recorded after it says when that buffer may be written again. So upload() returns at once
// (the per-token StepParams upload never waits for the stream), the caller may reuse its
// bytes, and the copy stays in order with the kernels around it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

#include "backends/cuda_vmm/context_capture_gate.h"
#include "backends/cuda_vmm/cuda_driver_api.h"
#include "backends/cuda_vmm/cuda_kernel_checks.h"
#include "backends/cuda_vmm/cuda_kernel_handles.h"
#include "backends/cuda_vmm/cuda_kernel_ops.h"
#include "backends/cuda_vmm/cuda_kernels.h"

namespace siesta {

using cuda_rt::status_from_cuda;

namespace {

constexpr size_t kUploadBufferBytes = size_t{4} << 20;  // each of the two pinned buffers

template <class T>
T* ptr(DeviceAddress address) {
  return reinterpret_cast<T*>(static_cast<uintptr_t>(address));
}

// A captured graph; replayable only by the CudaKernels (its Impl) that captured it.
class CudaKernelGraph final : public KernelGraph {
 public:
  CudaKernelGraph(const void* owner, cuda_rt::Graph graph, cuda_rt::GraphExec exec,
                  size_t operations)
      : owner_(owner), graph_(std::move(graph)), exec_(std::move(exec)), operations_(operations) {}
  size_t operation_count() const override { return operations_; }
  const void* owner() const { return owner_; }
  cudaGraphExec_t exec() const { return exec_.get(); }

 private:
  const void* owner_;
  cuda_rt::Graph graph_;  // kept for the graph's lifetime (debugging, future updates)
  cuda_rt::GraphExec exec_;
  size_t operations_;
};

}  // namespace

struct CudaKernels::Impl {
  int device = 0;
  cuda_rt::Stream stream;
  std::array<cuda_rt::PinnedHost, 2> upload_buffers;
  std::array<cuda_rt::Event, 2> upload_done;  // recorded after the copy out of buffer i
  std::array<bool, 2> upload_pending{false, false};
  size_t next_buffer = 0;

  bool capturing = false;
  // Held exclusively from begin_capture to end_capture (context_capture_gate.h).
  std::unique_lock<std::shared_mutex> capture_gate;
  std::optional<Status> capture_error;  // the first error an operation returned while capturing
  size_t captured_operations = 0;

  // Makes this object's device current for the calling thread (the runtime keeps the
  // current device per thread; the engine thread may differ from the creating thread).
  Status enter(std::string_view what) const {
    return status_from_cuda(cudaSetDevice(device),
                            std::string("cudaSetDevice before ") + std::string(what));
  }

  // Runs one operation: host checks, then the launch; while capturing, counts it and keeps
  // the first error for end_capture().
  // (No Status is ever assigned in this file: nvcc's front end takes the assignment
  // operator's result for a discarded [[nodiscard]] value, and -Werror makes that fatal.)
  template <class Launch>
  Status run(std::string_view what, Status checked, Launch&& launch) {
    if (capturing) ++captured_operations;
    Status result =
        !checked.ok() ? std::move(checked) : launch_checked(what, std::forward<Launch>(launch));
    if (capturing && !result.ok() && !capture_error) capture_error.emplace(result);
    return result;
  }

  template <class Launch>
  Status launch_checked(std::string_view what, Launch&& launch) {
    Status entered = enter(what);
    if (!entered.ok()) return entered;
    return status_from_cuda(launch(stream.get()), std::string(what) + " launch");
  }

  Status refuse_while_capturing(std::string_view what) const {
    if (!capturing) return Status::Ok();
    return FailedPrecondition(std::string(what) + " while a graph is being captured");
  }
};

Result<std::unique_ptr<Kernels>> CudaKernels::create(int device_ordinal) {
  if (device_ordinal < 0) {
    return InvalidArgument("CUDA device ordinal " + std::to_string(device_ordinal) +
                           " is negative");
  }
  // Ask the driver first: without one the runtime says only "driver version is
  // insufficient", which misleads on a machine that has no GPU at all.
  Result<const cuda::DriverApi*> driver = cuda::driver();
  if (!driver.ok()) return Unsupported("CUDA kernels unavailable: " + driver.status().message());
  int count = 0;
  Status counted = status_from_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (!counted.ok()) return counted.with_context("CUDA kernels unavailable");
  if (device_ordinal >= count) {
    return Unsupported("CUDA kernels unavailable: no CUDA device " +
                       std::to_string(device_ordinal) + ": the runtime sees " +
                       std::to_string(count) + " device(s)");
  }

  auto impl = std::make_unique<Impl>();
  impl->device = device_ordinal;
  SIESTA_RETURN_IF_ERROR(impl->enter("creating CUDA kernels"));
  // Non-blocking: no implicit ordering with the legacy default stream, which other code in
  // the process (tests, libraries) may use; all ordering here is explicit.
  cudaStream_t stream = nullptr;
  SIESTA_RETURN_IF_ERROR(status_from_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                          "cudaStreamCreateWithFlags"));
  impl->stream = cuda_rt::Stream(stream);
  for (size_t i = 0; i < impl->upload_buffers.size(); ++i) {
    void* host = nullptr;
    SIESTA_RETURN_IF_ERROR(status_from_cuda(
        cudaHostAlloc(&host, kUploadBufferBytes, cudaHostAllocDefault),
        "cudaHostAlloc(" + std::to_string(kUploadBufferBytes) + " bytes upload buffer)"));
    impl->upload_buffers[i] = cuda_rt::PinnedHost(host);
    cudaEvent_t event = nullptr;
    SIESTA_RETURN_IF_ERROR(status_from_cuda(
        cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags"));
    impl->upload_done[i] = cuda_rt::Event(event);
  }
  return std::unique_ptr<Kernels>(new CudaKernels(std::move(impl)));
}

CudaKernels::CudaKernels(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CudaKernels::~CudaKernels() {
  if (impl_->enter("destroying CUDA kernels").ok()) {
    if (impl_->capturing) {  // end the capture so the stream is usable (and freed) normally
      cudaGraph_t graph = nullptr;
      (void)cudaStreamEndCapture(impl_->stream.get(), &graph);
      cuda_rt::Graph discarded(graph);
      impl_->capture_gate = {};
    }
    (void)cudaStreamSynchronize(impl_->stream.get());  // pinned buffers may still be read
  }
}

std::string CudaKernels::name() const { return "cuda"; }

// ---- Operations ------------------------------------------------------------------------------

using namespace cuda_checks;  // NOLINT(google-build-using-namespace): the checks read as prose

Status CudaKernels::embed(DeviceAddress table, uint32_t dim, DeviceAddress params,
                          DeviceAddress out) {
  return impl_->run("embed",
                    all({positive(dim, "embed dim"), f32(table, "embed table"),
                         step_params(params, "embed"), f32(out, "embed out")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::embed(s, ptr<const float>(table), dim,
                                             ptr<const StepParams>(params), ptr<float>(out));
                    });
}

Status CudaKernels::rms_norm(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                             DeviceAddress out) {
  return impl_->run("rms_norm",
                    all({positive(dim, "rms_norm dim"), eps_ok(eps), f32(x, "rms_norm x"),
                         f32(weight, "rms_norm weight"), f32(out, "rms_norm out")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::rms_norm(s, ptr<const float>(x), ptr<const float>(weight),
                                                dim, eps, ptr<float>(out));
                    });
}

Status CudaKernels::matmul(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                           DeviceAddress out) {
  return impl_->run(
      "matmul",
      all({positive(rows, "matmul rows"), positive(cols, "matmul cols"), f32(w, "matmul w"),
           f32(x, "matmul x"), f32(out, "matmul out"),
           disjoint(out, uint64_t{rows} * 4, x, uint64_t{cols} * 4, "matmul out and x")}),
      [&](cudaStream_t s) {
        return cuda_ops::matmul(s, ptr<const float>(w), ptr<const float>(x), rows, cols,
                                ptr<float>(out));
      });
}

Status CudaKernels::add(DeviceAddress x, uint32_t n, DeviceAddress inout) {
  return impl_->run(
      "add", all({positive(n, "add n"), f32(x, "add x"), f32(inout, "add inout")}),
      [&](cudaStream_t s) { return cuda_ops::add(s, ptr<const float>(x), n, ptr<float>(inout)); });
}

Status CudaKernels::swiglu(DeviceAddress gate, DeviceAddress up, uint32_t n, DeviceAddress out) {
  return impl_->run("swiglu",
                    all({positive(n, "swiglu n"), f32(gate, "swiglu gate"), f32(up, "swiglu up"),
                         f32(out, "swiglu out")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::swiglu(s, ptr<const float>(gate), ptr<const float>(up), n,
                                              ptr<float>(out));
                    });
}

Status CudaKernels::rope_table(DeviceAddress table, uint32_t context, uint32_t head_dim,
                               float theta) {
  return impl_->run("rope_table",
                    all({positive(context, "rope_table context"), even_head_dim(head_dim),
                         theta_ok(theta), f32(table, "rope_table table")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::rope_table(s, ptr<float>(table), context, head_dim, theta);
                    });
}

Status CudaKernels::rope(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
                         DeviceAddress params) {
  return impl_->run(
      "rope",
      all({positive(heads, "rope heads"), even_head_dim(head_dim), f32(vec, "rope vec"),
           f32(table, "rope table"), step_params(params, "rope")}),
      [&](cudaStream_t s) {
        return cuda_ops::rope(s, ptr<float>(vec), heads, head_dim, ptr<const float>(table),
                              ptr<const StepParams>(params));
      });
}

Status CudaKernels::kv_store(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                             DeviceAddress k_cache, DeviceAddress v_cache, DeviceAddress params) {
  return impl_->run(
      "kv_store",
      all({kv_dim(type, dim, "kv_store"), f32(k, "kv_store k"), f32(v, "kv_store v"),
           kv_cache(type, k_cache, "kv_store k_cache"), kv_cache(type, v_cache, "kv_store v_cache"),
           step_params(params, "kv_store")}),
      [&](cudaStream_t s) {
        return cuda_ops::kv_store(s, ptr<const float>(k), ptr<const float>(v), type, dim,
                                  ptr<void>(k_cache), ptr<void>(v_cache),
                                  ptr<const StepParams>(params));
      });
}

namespace {

Status attention_checks(std::string_view op, DeviceAddress q, DeviceAddress k_cache,
                        DeviceAddress v_cache, KvType type, uint32_t heads, uint32_t head_dim,
                        uint32_t context, uint32_t rows, DeviceAddress out) {
  const uint64_t dim = uint64_t{heads} * head_dim;
  const std::string name(op);
  return all(
      {positive(heads, name + " heads"), positive(head_dim, name + " head_dim"),
       positive(context, name + " context"),
       dim <= UINT32_MAX ? Status::Ok() : InvalidArgument(name + " heads * head_dim overflows"),
       head_dim <= cuda_ops::kMaxAttentionHeadDim
           ? Status::Ok()
           : InvalidArgument(name + " head_dim " + std::to_string(head_dim) +
                             " is above the CUDA kernels' " +
                             std::to_string(cuda_ops::kMaxAttentionHeadDim)),
       kv_dim(type, static_cast<uint32_t>(dim), op), f32(q, name + " q"),
       kv_cache(type, k_cache, name + " k_cache"), kv_cache(type, v_cache, name + " v_cache"),
       f32(out, name + " out"),
       disjoint(out, dim * 4 * rows, q, dim * 4 * rows, name + " out and q")});
}

}  // namespace

Status CudaKernels::attention(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache,
                              KvType type, uint32_t heads, uint32_t head_dim, uint32_t context,
                              DeviceAddress params, DeviceAddress out) {
  return impl_->run("attention",
                    all({attention_checks("attention", q, k_cache, v_cache, type, heads, head_dim,
                                          context, 1, out),
                         step_params(params, "attention")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::attention(s, ptr<const float>(q), ptr<const void>(k_cache),
                                                 ptr<const void>(v_cache), type, heads, head_dim,
                                                 context, ptr<const StepParams>(params),
                                                 ptr<float>(out));
                    });
}

Status CudaKernels::recurrent_update(DeviceAddress input, DeviceAddress gate, uint32_t n,
                                     DeviceAddress state) {
  return impl_->run("recurrent_update",
                    all({positive(n, "recurrent_update n"), f32(input, "recurrent_update input"),
                         f32(gate, "recurrent_update gate"), f32(state, "recurrent_update state")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::recurrent_update(
                          s, ptr<const float>(input), ptr<const float>(gate), n, ptr<float>(state));
                    });
}

Status CudaKernels::argmax(DeviceAddress logits, uint32_t first, uint32_t last, DeviceAddress out) {
  return impl_->run("argmax",
                    all({first <= last ? Status::Ok()
                                       : InvalidArgument("argmax first " + std::to_string(first) +
                                                         " > last " + std::to_string(last)),
                         f32(logits, "argmax logits"), f32(out, "argmax out")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::argmax(s, ptr<const float>(logits), first, last,
                                              ptr<int32_t>(out));
                    });
}

// ---- Block operations ------------------------------------------------------------------------

Status CudaKernels::embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens,
                                uint32_t count, DeviceAddress out) {
  return impl_->run("embed_block",
                    all({positive(dim, "embed_block dim"), positive(count, "embed_block count"),
                         f32(table, "embed_block table"), aligned(tokens, 4, "embed_block tokens"),
                         f32(out, "embed_block out")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::embed_block(s, ptr<const float>(table), dim,
                                                   ptr<const int32_t>(tokens), count,
                                                   ptr<float>(out));
                    });
}

Status CudaKernels::rms_norm_block(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                                   uint32_t count, DeviceAddress out) {
  return impl_->run(
      "rms_norm_block",
      all({positive(dim, "rms_norm_block dim"), positive(count, "rms_norm_block count"),
           eps_ok(eps), f32(x, "rms_norm_block x"), f32(weight, "rms_norm_block weight"),
           f32(out, "rms_norm_block out")}),
      [&](cudaStream_t s) {
        return cuda_ops::rms_norm_block(s, ptr<const float>(x), ptr<const float>(weight), dim, eps,
                                        count, ptr<float>(out));
      });
}

Status CudaKernels::matmul_block(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                                 uint32_t count, DeviceAddress out) {
  return impl_->run("matmul_block",
                    all({positive(rows, "matmul_block rows"), positive(cols, "matmul_block cols"),
                         positive(count, "matmul_block count"), f32(w, "matmul_block w"),
                         f32(x, "matmul_block x"), f32(out, "matmul_block out"),
                         disjoint(out, uint64_t{count} * rows * 4, x, uint64_t{count} * cols * 4,
                                  "matmul_block out and x")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::matmul_block(s, ptr<const float>(w), ptr<const float>(x),
                                                    rows, cols, count, ptr<float>(out));
                    });
}

Status CudaKernels::rope_block(DeviceAddress vec, uint32_t heads, uint32_t head_dim,
                               DeviceAddress table, uint32_t position, uint32_t count) {
  return impl_->run("rope_block",
                    all({positive(heads, "rope_block heads"), even_head_dim(head_dim),
                         positive(count, "rope_block count"), f32(vec, "rope_block vec"),
                         f32(table, "rope_block table")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::rope_block(s, ptr<float>(vec), heads, head_dim,
                                                  ptr<const float>(table), position, count);
                    });
}

Status CudaKernels::kv_store_block(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                                   DeviceAddress k_cache, DeviceAddress v_cache, uint32_t position,
                                   uint32_t count) {
  return impl_->run(
      "kv_store_block",
      all({kv_dim(type, dim, "kv_store_block"), positive(count, "kv_store_block count"),
           f32(k, "kv_store_block k"), f32(v, "kv_store_block v"),
           kv_cache(type, k_cache, "kv_store_block k_cache"),
           kv_cache(type, v_cache, "kv_store_block v_cache")}),
      [&](cudaStream_t s) {
        return cuda_ops::kv_store_block(s, ptr<const float>(k), ptr<const float>(v), type, dim,
                                        ptr<void>(k_cache), ptr<void>(v_cache), position, count);
      });
}

Status CudaKernels::attention_block(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache,
                                    KvType type, uint32_t heads, uint32_t head_dim,
                                    uint32_t context, uint32_t position, uint32_t count,
                                    DeviceAddress scratch, DeviceAddress out) {
  return impl_->run(
      "attention_block",
      all({positive(count, "attention_block count"), f32(scratch, "attention_block scratch"),
           attention_checks("attention_block", q, k_cache, v_cache, type, heads, head_dim, context,
                            count, out)}),
      [&](cudaStream_t s) {
        return cuda_ops::attention_block(s, ptr<const float>(q), ptr<const void>(k_cache),
                                         ptr<const void>(v_cache), type, heads, head_dim, context,
                                         position, count, ptr<float>(scratch), ptr<float>(out));
      });
}

Status CudaKernels::recurrent_scan(DeviceAddress input, DeviceAddress gate, uint32_t n,
                                   uint32_t count, DeviceAddress state, DeviceAddress states) {
  return impl_->run("recurrent_scan",
                    all({positive(n, "recurrent_scan n"), positive(count, "recurrent_scan count"),
                         f32(input, "recurrent_scan input"), f32(gate, "recurrent_scan gate"),
                         f32(state, "recurrent_scan state"), f32(states, "recurrent_scan states")}),
                    [&](cudaStream_t s) {
                      return cuda_ops::recurrent_scan(s, ptr<const float>(input),
                                                      ptr<const float>(gate), n, count,
                                                      ptr<float>(state), ptr<float>(states));
                    });
}

// ---- Transfers -------------------------------------------------------------------------------

Status CudaKernels::upload(std::span<const std::byte> source, DeviceAddress destination) {
  SIESTA_RETURN_IF_ERROR(impl_->refuse_while_capturing("upload"));
  if (source.empty()) return Status::Ok();
  if (destination == 0) return InvalidArgument("upload to a null device address");
  SIESTA_RETURN_IF_ERROR(impl_->enter("upload"));
  Impl& m = *impl_;
  for (size_t offset = 0; offset < source.size(); offset += kUploadBufferBytes) {
    const size_t bytes = std::min(kUploadBufferBytes, source.size() - offset);
    const size_t i = m.next_buffer;
    m.next_buffer = (i + 1) % m.upload_buffers.size();
    if (m.upload_pending[i]) {  // the copy out of this buffer may still be reading it
      SIESTA_RETURN_IF_ERROR(status_from_cuda(cudaEventSynchronize(m.upload_done[i].get()),
                                              "cudaEventSynchronize(upload buffer)"));
      m.upload_pending[i] = false;
    }
    std::memcpy(m.upload_buffers[i].get(), source.data() + offset, bytes);
    SIESTA_RETURN_IF_ERROR(
        status_from_cuda(cudaMemcpyAsync(ptr<void>(destination + offset), m.upload_buffers[i].get(),
                                         bytes, cudaMemcpyHostToDevice, m.stream.get()),
                         "cudaMemcpyAsync(upload of " + std::to_string(bytes) + " bytes)"));
    SIESTA_RETURN_IF_ERROR(status_from_cuda(cudaEventRecord(m.upload_done[i].get(), m.stream.get()),
                                            "cudaEventRecord(upload buffer)"));
    m.upload_pending[i] = true;
  }
  return Status::Ok();
}

Status CudaKernels::download(DeviceAddress source, std::span<std::byte> destination) {
  SIESTA_RETURN_IF_ERROR(impl_->refuse_while_capturing("download"));
  SIESTA_RETURN_IF_ERROR(synchronize());
  if (destination.empty()) return Status::Ok();
  if (source == 0) return InvalidArgument("download from a null device address");
  // The stream is idle, so a plain synchronous copy is ordered after all of its work.
  return status_from_cuda(
      cudaMemcpy(destination.data(), ptr<const void>(source), destination.size(),
                 cudaMemcpyDeviceToHost),
      "cudaMemcpy(download of " + std::to_string(destination.size()) + " bytes)");
}

Status CudaKernels::synchronize() {
  SIESTA_RETURN_IF_ERROR(impl_->refuse_while_capturing("synchronize"));
  SIESTA_RETURN_IF_ERROR(impl_->enter("synchronize"));
  SIESTA_RETURN_IF_ERROR(
      status_from_cuda(cudaStreamSynchronize(impl_->stream.get()), "cudaStreamSynchronize"));
  impl_->upload_pending = {false, false};
  return Status::Ok();
}

namespace {

// An event recorded on the kernels' stream; waiting for it waits for that stream's work up to
// the record, not for later work on it or for other streams.
class StreamEventFence final : public KernelFence {
 public:
  StreamEventFence(int device, cuda_rt::Event event) : device_(device), event_(std::move(event)) {}

  Status wait() override {
    Status entered = status_from_cuda(cudaSetDevice(device_), "cudaSetDevice before a fence");
    if (!entered.ok()) return entered;
    // Held shared like every context-level wait (context_capture_gate.h), although an event
    // recorded before a capture began is not the capturing stream: waits and captures never
    // overlap, whatever the driver allows.
    std::shared_lock gate(cuda::primary_context_capture_gate());
    return status_from_cuda(cudaEventSynchronize(event_.get()), "cudaEventSynchronize");
  }

 private:
  const int device_;
  cuda_rt::Event event_;
};

}  // namespace

Result<std::unique_ptr<KernelFence>> CudaKernels::fence() {
  SIESTA_RETURN_IF_ERROR(impl_->refuse_while_capturing("fence"));
  SIESTA_RETURN_IF_ERROR(impl_->enter("fence"));
  cudaEvent_t event = nullptr;
  SIESTA_RETURN_IF_ERROR(status_from_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
                                          "cudaEventCreateWithFlags"));
  cuda_rt::Event owned(event);
  SIESTA_RETURN_IF_ERROR(
      status_from_cuda(cudaEventRecord(owned.get(), impl_->stream.get()), "cudaEventRecord"));
  return std::unique_ptr<KernelFence>(
      std::make_unique<StreamEventFence>(impl_->device, std::move(owned)));
}

// ---- Graphs ----------------------------------------------------------------------------------

Status CudaKernels::begin_capture() {
  if (impl_->capturing) return FailedPrecondition("begin_capture while already capturing");
  SIESTA_RETURN_IF_ERROR(impl_->enter("begin_capture"));
  // Thread-local mode: only this thread's unsafe calls would break the capture, so the VMM
  // backend's copies and commits on other threads carry on meanwhile -- all but a context-wide
  // synchronisation, which the gate holds off until end_capture (context_capture_gate.h).
  impl_->capture_gate = std::unique_lock(cuda::primary_context_capture_gate());
  Status begun = status_from_cuda(
      cudaStreamBeginCapture(impl_->stream.get(), cudaStreamCaptureModeThreadLocal),
      "cudaStreamBeginCapture");
  if (!begun.ok()) {
    impl_->capture_gate = {};
    return begun;
  }
  impl_->capturing = true;
  impl_->capture_error.reset();
  impl_->captured_operations = 0;
  return Status::Ok();
}

Result<std::unique_ptr<KernelGraph>> CudaKernels::end_capture() {
  if (!impl_->capturing) return FailedPrecondition("end_capture without begin_capture");
  impl_->capturing = false;
  // The capture is over once this returns, whatever it returns: the gate opens with it.
  const std::unique_lock<std::shared_mutex> gate = std::move(impl_->capture_gate);
  SIESTA_RETURN_IF_ERROR(impl_->enter("end_capture"));
  cudaGraph_t raw_graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(impl_->stream.get(), &raw_graph);
  cuda_rt::Graph graph(raw_graph);  // freed on every early return below
  if (impl_->capture_error) {
    return impl_->capture_error->with_context("an operation failed while capturing");
  }
  SIESTA_RETURN_IF_ERROR(status_from_cuda(ended, "cudaStreamEndCapture"));
  cudaGraphExec_t raw_exec = nullptr;
  SIESTA_RETURN_IF_ERROR(
      status_from_cuda(cudaGraphInstantiate(&raw_exec, graph.get(), 0), "cudaGraphInstantiate"));
  cuda_rt::GraphExec exec(raw_exec);
  return std::unique_ptr<KernelGraph>(std::make_unique<CudaKernelGraph>(
      impl_.get(), std::move(graph), std::move(exec), impl_->captured_operations));
}

Status CudaKernels::replay(const KernelGraph& graph) {
  if (impl_->capturing) return FailedPrecondition("replay while a graph is being captured");
  const auto* cuda_graph = dynamic_cast<const CudaKernelGraph*>(&graph);
  if (cuda_graph == nullptr || cuda_graph->owner() != impl_.get()) {
    return InvalidArgument("replay of a graph that this CudaKernels did not capture");
  }
  SIESTA_RETURN_IF_ERROR(impl_->enter("replay"));
  return status_from_cuda(cudaGraphLaunch(cuda_graph->exec(), impl_->stream.get()),
                          "cudaGraphLaunch");
}

}  // namespace siesta
