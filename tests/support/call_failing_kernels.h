// CallFailingKernels: forwards every Kernels call to the wrapped kernels, except the one armed
// to fail: the nth call (1-based, counted from arm()) of any operation that returns a Status or
// a Result (the operations, upload, download, synchronize, begin_capture, end_capture, replay;
// fence() is forwarded uncounted) returns an injected DeviceError naming the call instead of
// running it. `sticky`: that call and every later one fail, as a device that stays broken.
// Disarmed (arm(0), the start), it only counts, so a test can learn how many calls a step makes
// and then fail each of them in turn.
//
// Thread rule: calls may come from the engine's thread while the test arms and reads on its
// own; arm() between commands (the counters are atomics, the name a pointer to a literal).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "compute/kernels_wrapper.h"

namespace siesta::testing {

class CallFailingKernels final : public KernelsWrapper {
 public:
  using KernelsWrapper::KernelsWrapper;

  // Fails the nth call from now (0: none), and with `sticky` every call after it too.
  void arm(uint64_t nth, bool sticky = false) {
    calls_.store(0);
    failed_.store(0);
    fired_.store(nullptr);
    fired_capturing_.store(false);
    sticky_.store(sticky);
    fail_at_.store(nth);
  }
  void disarm() { arm(0); }

  uint64_t calls() const { return calls_.load(); }      // counted since arm()
  uint64_t failures() const { return failed_.load(); }  // calls refused since arm()
  // The first call refused since arm(), or nullptr.
  const char* fired() const { return fired_.load(); }
  // Whether that call came between a successful begin_capture() and its end_capture().
  bool fired_while_capturing() const { return fired_capturing_.load(); }

  Status embed(DeviceAddress table, uint32_t dim, DeviceAddress params,
               DeviceAddress out) override {
    if (refuse("embed")) return injected("embed");
    return KernelsWrapper::embed(table, dim, params, out);
  }
  Status rms_norm(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                  DeviceAddress out) override {
    if (refuse("rms_norm")) return injected("rms_norm");
    return KernelsWrapper::rms_norm(x, weight, dim, eps, out);
  }
  Status matmul(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                DeviceAddress out) override {
    if (refuse("matmul")) return injected("matmul");
    return KernelsWrapper::matmul(w, x, rows, cols, out);
  }
  Status add(DeviceAddress x, uint32_t n, DeviceAddress inout) override {
    if (refuse("add")) return injected("add");
    return KernelsWrapper::add(x, n, inout);
  }
  Status swiglu(DeviceAddress gate, DeviceAddress up, uint32_t n, DeviceAddress out) override {
    if (refuse("swiglu")) return injected("swiglu");
    return KernelsWrapper::swiglu(gate, up, n, out);
  }
  Status rope_table(DeviceAddress table, uint32_t context, uint32_t head_dim,
                    float theta) override {
    if (refuse("rope_table")) return injected("rope_table");
    return KernelsWrapper::rope_table(table, context, head_dim, theta);
  }
  Status rope(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
              DeviceAddress params) override {
    if (refuse("rope")) return injected("rope");
    return KernelsWrapper::rope(vec, heads, head_dim, table, params);
  }
  Status kv_store(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                  DeviceAddress k_cache, DeviceAddress v_cache, DeviceAddress params) override {
    if (refuse("kv_store")) return injected("kv_store");
    return KernelsWrapper::kv_store(k, v, type, dim, k_cache, v_cache, params);
  }
  Status attention(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache, KvType type,
                   uint32_t heads, uint32_t head_dim, uint32_t context, DeviceAddress params,
                   DeviceAddress out) override {
    if (refuse("attention")) return injected("attention");
    return KernelsWrapper::attention(q, k_cache, v_cache, type, heads, head_dim, context, params,
                                     out);
  }
  Status recurrent_update(DeviceAddress input, DeviceAddress gate, uint32_t n,
                          DeviceAddress state) override {
    if (refuse("recurrent_update")) return injected("recurrent_update");
    return KernelsWrapper::recurrent_update(input, gate, n, state);
  }
  Status argmax(DeviceAddress logits, uint32_t first, uint32_t last, DeviceAddress out) override {
    if (refuse("argmax")) return injected("argmax");
    return KernelsWrapper::argmax(logits, first, last, out);
  }

  Status embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens, uint32_t count,
                     DeviceAddress out) override {
    if (refuse("embed_block")) return injected("embed_block");
    return KernelsWrapper::embed_block(table, dim, tokens, count, out);
  }
  Status rms_norm_block(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                        uint32_t count, DeviceAddress out) override {
    if (refuse("rms_norm_block")) return injected("rms_norm_block");
    return KernelsWrapper::rms_norm_block(x, weight, dim, eps, count, out);
  }
  Status matmul_block(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                      uint32_t count, DeviceAddress out) override {
    if (refuse("matmul_block")) return injected("matmul_block");
    return KernelsWrapper::matmul_block(w, x, rows, cols, count, out);
  }
  Status rope_block(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
                    uint32_t position, uint32_t count) override {
    if (refuse("rope_block")) return injected("rope_block");
    return KernelsWrapper::rope_block(vec, heads, head_dim, table, position, count);
  }
  Status kv_store_block(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                        DeviceAddress k_cache, DeviceAddress v_cache, uint32_t position,
                        uint32_t count) override {
    if (refuse("kv_store_block")) return injected("kv_store_block");
    return KernelsWrapper::kv_store_block(k, v, type, dim, k_cache, v_cache, position, count);
  }
  Status attention_block(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache, KvType type,
                         uint32_t heads, uint32_t head_dim, uint32_t context, uint32_t position,
                         uint32_t count, DeviceAddress scratch, DeviceAddress out) override {
    if (refuse("attention_block")) return injected("attention_block");
    return KernelsWrapper::attention_block(q, k_cache, v_cache, type, heads, head_dim, context,
                                           position, count, scratch, out);
  }
  Status recurrent_scan(DeviceAddress input, DeviceAddress gate, uint32_t n, uint32_t count,
                        DeviceAddress state, DeviceAddress states) override {
    if (refuse("recurrent_scan")) return injected("recurrent_scan");
    return KernelsWrapper::recurrent_scan(input, gate, n, count, state, states);
  }

  Status upload(std::span<const std::byte> source, DeviceAddress destination) override {
    if (refuse("upload")) return injected("upload");
    return KernelsWrapper::upload(source, destination);
  }
  Status download(DeviceAddress source, std::span<std::byte> destination) override {
    if (refuse("download")) return injected("download");
    return KernelsWrapper::download(source, destination);
  }
  Status synchronize() override {
    if (refuse("synchronize")) return injected("synchronize");
    return KernelsWrapper::synchronize();
  }

  Status begin_capture() override {
    if (refuse("begin_capture")) return injected("begin_capture");
    Status begun = KernelsWrapper::begin_capture();
    if (begun.ok()) capturing_.store(true);
    return begun;
  }
  Result<std::unique_ptr<KernelGraph>> end_capture() override {
    // The capture ends whatever this call answers: the wrapped kernels end it either way.
    Result<std::unique_ptr<KernelGraph>> graph = KernelsWrapper::end_capture();
    const bool refused = refuse("end_capture");
    capturing_.store(false);
    if (refused) return injected("end_capture");
    return graph;
  }
  Status replay(const KernelGraph& graph) override {
    if (refuse("replay")) return injected("replay");
    return KernelsWrapper::replay(graph);
  }

 private:
  bool refuse(const char* call) {
    const uint64_t n = calls_.fetch_add(1) + 1;
    const uint64_t at = fail_at_.load();
    if (at == 0 || n < at || (n > at && !sticky_.load())) return false;
    failed_.fetch_add(1);
    const char* none = nullptr;
    if (fired_.compare_exchange_strong(none, call)) fired_capturing_.store(capturing_.load());
    return true;
  }
  static Status injected(const std::string& call) {
    return DeviceError("injected failure of kernels " + call);
  }

  std::atomic<uint64_t> calls_{0};
  std::atomic<uint64_t> fail_at_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<bool> sticky_{false};
  std::atomic<const char*> fired_{nullptr};
  std::atomic<bool> capturing_{false};
  std::atomic<bool> fired_capturing_{false};
};

}  // namespace siesta::testing
