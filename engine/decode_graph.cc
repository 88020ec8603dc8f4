#include "engine/decode_graph.h"

namespace siesta::engine {
namespace {

Status record_step(Kernels& k, const Model& model, const SessionLayout& layout,
                   DeviceAddress base) {
  const ModelConfig& c = model.config();
  const ScratchOffsets& o = layout.buffers;
  const DeviceAddress x = base + o.x, xn = base + o.xn, q = base + o.q, kk = base + o.k;
  const DeviceAddress v = base + o.v, attn = base + o.attn, proj = base + o.proj;
  const DeviceAddress gate = base + o.gate, up = base + o.up, logits = base + o.logits;
  const DeviceAddress params = base + o.params, next = base + o.next;
  const DeviceAddress rope = base + layout.offset(layout.rope);
  const DeviceAddress state = base + layout.offset(layout.state);
  const uint32_t d = c.dim, f = c.ffn_dim;

  SIESTA_RETURN_IF_ERROR(k.embed(model.embedding(), d, params, x));
  for (uint32_t l = 0; l < c.layers; ++l) {
    const AttentionWeights& w = model.blocks()[l];
    const DeviceAddress k_cache = base + layout.offset(layout.k_region(l));
    const DeviceAddress v_cache = base + layout.offset(layout.v_region(l));
    SIESTA_RETURN_IF_ERROR(k.rms_norm(x, w.attn_norm, d, c.norm_eps, xn));
    SIESTA_RETURN_IF_ERROR(k.matmul(w.wq, xn, d, d, q));
    SIESTA_RETURN_IF_ERROR(k.matmul(w.wk, xn, d, d, kk));
    SIESTA_RETURN_IF_ERROR(k.matmul(w.wv, xn, d, d, v));
    SIESTA_RETURN_IF_ERROR(k.rope(q, c.heads, c.head_dim(), rope, params));
    SIESTA_RETURN_IF_ERROR(k.rope(kk, c.heads, c.head_dim(), rope, params));
    SIESTA_RETURN_IF_ERROR(k.kv_store(kk, v, c.kv_type, d, k_cache, v_cache, params));
    SIESTA_RETURN_IF_ERROR(k.attention(q, k_cache, v_cache, c.kv_type, c.heads, c.head_dim(),
                                       c.context, params, attn));
    SIESTA_RETURN_IF_ERROR(k.matmul(w.wo, attn, d, d, proj));
    SIESTA_RETURN_IF_ERROR(k.add(proj, d, x));
    SIESTA_RETURN_IF_ERROR(k.rms_norm(x, w.ffn_norm, d, c.norm_eps, xn));
    SIESTA_RETURN_IF_ERROR(k.matmul(w.w_gate, xn, f, d, gate));
    SIESTA_RETURN_IF_ERROR(k.matmul(w.w_up, xn, f, d, up));
    SIESTA_RETURN_IF_ERROR(k.swiglu(gate, up, f, gate));
    SIESTA_RETURN_IF_ERROR(k.matmul(w.w_down, gate, d, f, proj));
    SIESTA_RETURN_IF_ERROR(k.add(proj, d, x));
    if (l == c.recurrent_after) {
      const RecurrentWeights& r = model.recurrent();
      SIESTA_RETURN_IF_ERROR(k.rms_norm(x, r.norm, d, c.norm_eps, xn));
      SIESTA_RETURN_IF_ERROR(k.matmul(r.w_input, xn, d, d, q));
      SIESTA_RETURN_IF_ERROR(k.matmul(r.w_gate, xn, d, d, kk));
      SIESTA_RETURN_IF_ERROR(k.recurrent_update(q, kk, d, state));
      SIESTA_RETURN_IF_ERROR(k.matmul(r.w_out, state, d, d, proj));
      SIESTA_RETURN_IF_ERROR(k.add(proj, d, x));
    }
  }
  SIESTA_RETURN_IF_ERROR(k.rms_norm(x, model.final_norm(), d, c.norm_eps, xn));
  SIESTA_RETURN_IF_ERROR(k.matmul(model.output(), xn, kVocabSize, d, logits));
  return k.argmax(logits, kFirstPrintable, kLastPrintable, next);
}

}  // namespace

Result<std::unique_ptr<KernelGraph>> record_decode_graph(Kernels& kernels, const Model& model,
                                                         const SessionLayout& layout,
                                                         DeviceAddress base) {
  SIESTA_RETURN_IF_ERROR(kernels.begin_capture());
  const Status recorded = record_step(kernels, model, layout, base);
  // end_capture() always runs, so a failed recording never leaves the kernels capturing.
  Result<std::unique_ptr<KernelGraph>> graph = kernels.end_capture();
  if (!recorded.ok()) return recorded.with_context("recording the decode step");
  if (!graph.ok()) return graph.status().with_context("recording the decode step");
  return graph;
}

}  // namespace siesta::engine
