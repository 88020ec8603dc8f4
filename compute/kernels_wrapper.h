// KernelsWrapper: a forwarding base for the Kernels seam (compute/kernels.h), as
// MemoryBackendWrapper is for memory: every call goes to the wrapped kernels, so a wrapper that
// injects a failure, stalls the device or counts steps overrides only the calls it changes and
// stays correct when the seam grows (the block operations were such a growth).
//
// Graphs are the wrapped kernels' own: end_capture() returns the target's graph and replay()
// hands it back to the target, so a wrapper that overrides neither never sees inside one.
//
// Ownership: the wrapper borrows its target, which must outlive it.
// Thread rule: as the wrapped kernels'.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "compute/kernels.h"

namespace siesta {

class KernelsWrapper : public Kernels {
 public:
  explicit KernelsWrapper(Kernels& target) : target_(&target) {}

  // The wrapped kernels.
  Kernels& target() const { return *target_; }

  std::string name() const override { return target_->name(); }
  uint32_t preferred_prefill_block() const override { return target_->preferred_prefill_block(); }

  Status embed(DeviceAddress table, uint32_t dim, DeviceAddress params,
               DeviceAddress out) override {
    return target_->embed(table, dim, params, out);
  }
  Status rms_norm(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                  DeviceAddress out) override {
    return target_->rms_norm(x, weight, dim, eps, out);
  }
  Status matmul(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                DeviceAddress out) override {
    return target_->matmul(w, x, rows, cols, out);
  }
  Status add(DeviceAddress x, uint32_t n, DeviceAddress inout) override {
    return target_->add(x, n, inout);
  }
  Status swiglu(DeviceAddress gate, DeviceAddress up, uint32_t n, DeviceAddress out) override {
    return target_->swiglu(gate, up, n, out);
  }
  Status rope_table(DeviceAddress table, uint32_t context, uint32_t head_dim,
                    float theta) override {
    return target_->rope_table(table, context, head_dim, theta);
  }
  Status rope(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
              DeviceAddress params) override {
    return target_->rope(vec, heads, head_dim, table, params);
  }
  Status kv_store(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                  DeviceAddress k_cache, DeviceAddress v_cache, DeviceAddress params) override {
    return target_->kv_store(k, v, type, dim, k_cache, v_cache, params);
  }
  Status attention(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache, KvType type,
                   uint32_t heads, uint32_t head_dim, uint32_t context, DeviceAddress params,
                   DeviceAddress out) override {
    return target_->attention(q, k_cache, v_cache, type, heads, head_dim, context, params, out);
  }
  Status recurrent_update(DeviceAddress input, DeviceAddress gate, uint32_t n,
                          DeviceAddress state) override {
    return target_->recurrent_update(input, gate, n, state);
  }
  Status argmax(DeviceAddress logits, uint32_t first, uint32_t last, DeviceAddress out) override {
    return target_->argmax(logits, first, last, out);
  }

  Status embed_block(DeviceAddress table, uint32_t dim, DeviceAddress tokens, uint32_t count,
                     DeviceAddress out) override {
    return target_->embed_block(table, dim, tokens, count, out);
  }
  Status rms_norm_block(DeviceAddress x, DeviceAddress weight, uint32_t dim, float eps,
                        uint32_t count, DeviceAddress out) override {
    return target_->rms_norm_block(x, weight, dim, eps, count, out);
  }
  Status matmul_block(DeviceAddress w, DeviceAddress x, uint32_t rows, uint32_t cols,
                      uint32_t count, DeviceAddress out) override {
    return target_->matmul_block(w, x, rows, cols, count, out);
  }
  Status rope_block(DeviceAddress vec, uint32_t heads, uint32_t head_dim, DeviceAddress table,
                    uint32_t position, uint32_t count) override {
    return target_->rope_block(vec, heads, head_dim, table, position, count);
  }
  Status kv_store_block(DeviceAddress k, DeviceAddress v, KvType type, uint32_t dim,
                        DeviceAddress k_cache, DeviceAddress v_cache, uint32_t position,
                        uint32_t count) override {
    return target_->kv_store_block(k, v, type, dim, k_cache, v_cache, position, count);
  }
  Status attention_block(DeviceAddress q, DeviceAddress k_cache, DeviceAddress v_cache, KvType type,
                         uint32_t heads, uint32_t head_dim, uint32_t context, uint32_t position,
                         uint32_t count, DeviceAddress scratch, DeviceAddress out) override {
    return target_->attention_block(q, k_cache, v_cache, type, heads, head_dim, context, position,
                                    count, scratch, out);
  }
  Status recurrent_scan(DeviceAddress input, DeviceAddress gate, uint32_t n, uint32_t count,
                        DeviceAddress state, DeviceAddress states) override {
    return target_->recurrent_scan(input, gate, n, count, state, states);
  }

  Status upload(std::span<const std::byte> source, DeviceAddress destination) override {
    return target_->upload(source, destination);
  }
  Status download(DeviceAddress source, std::span<std::byte> destination) override {
    return target_->download(source, destination);
  }
  Status synchronize() override { return target_->synchronize(); }
  Result<std::unique_ptr<KernelFence>> fence() override { return target_->fence(); }

  Status begin_capture() override { return target_->begin_capture(); }
  Result<std::unique_ptr<KernelGraph>> end_capture() override { return target_->end_capture(); }
  Status replay(const KernelGraph& graph) override { return target_->replay(graph); }

 private:
  Kernels* target_;
};

}  // namespace siesta
