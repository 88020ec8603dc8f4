#include "engine/prefill_step.h"

namespace siesta::engine {

Status enqueue_prefill_step(Kernels& k, const Model& model, const SessionLayout& layout,
                            DeviceAddress base, uint32_t position, uint32_t n) {
  const ModelConfig& c = model.config();
  const ScratchOffsets& o = layout.buffers;
  const DeviceAddress x = base + o.x, xn = base + o.xn, q = base + o.q, kk = base + o.k;
  const DeviceAddress v = base + o.v, attn = base + o.attn, proj = base + o.proj;
  const DeviceAddress gate = base + o.gate, up = base + o.up, logits = base + o.logits;
  const DeviceAddress states = base + o.states, tokens = base + o.tokens;
  const DeviceAddress scratch = base + o.attention, next = base + o.next;
  const DeviceAddress rope = base + layout.offset(layout.rope);
  const DeviceAddress state = base + layout.offset(layout.state);
  const uint32_t d = c.dim, f = c.ffn_dim;

  SIESTA_RETURN_IF_ERROR(k.embed_block(model.embedding(), d, tokens, n, x));
  for (uint32_t l = 0; l < c.layers; ++l) {
    const AttentionWeights& w = model.blocks()[l];
    const DeviceAddress k_cache = base + layout.offset(layout.k_region(l));
    const DeviceAddress v_cache = base + layout.offset(layout.v_region(l));
    SIESTA_RETURN_IF_ERROR(k.rms_norm_block(x, w.attn_norm, d, c.norm_eps, n, xn));
    SIESTA_RETURN_IF_ERROR(k.matmul_block(w.wq, xn, d, d, n, q));
    SIESTA_RETURN_IF_ERROR(k.matmul_block(w.wk, xn, d, d, n, kk));
    SIESTA_RETURN_IF_ERROR(k.matmul_block(w.wv, xn, d, d, n, v));
    SIESTA_RETURN_IF_ERROR(k.rope_block(q, c.heads, c.head_dim(), rope, position, n));
    SIESTA_RETURN_IF_ERROR(k.rope_block(kk, c.heads, c.head_dim(), rope, position, n));
    SIESTA_RETURN_IF_ERROR(k.kv_store_block(kk, v, c.kv_type, d, k_cache, v_cache, position, n));
    SIESTA_RETURN_IF_ERROR(k.attention_block(q, k_cache, v_cache, c.kv_type, c.heads, c.head_dim(),
                                             c.context, position, n, scratch, attn));
    SIESTA_RETURN_IF_ERROR(k.matmul_block(w.wo, attn, d, d, n, proj));
    SIESTA_RETURN_IF_ERROR(k.add(proj, n * d, x));
    SIESTA_RETURN_IF_ERROR(k.rms_norm_block(x, w.ffn_norm, d, c.norm_eps, n, xn));
    SIESTA_RETURN_IF_ERROR(k.matmul_block(w.w_gate, xn, f, d, n, gate));
    SIESTA_RETURN_IF_ERROR(k.matmul_block(w.w_up, xn, f, d, n, up));
    SIESTA_RETURN_IF_ERROR(k.swiglu(gate, up, n * f, gate));
    SIESTA_RETURN_IF_ERROR(k.matmul_block(w.w_down, gate, d, f, n, proj));
    SIESTA_RETURN_IF_ERROR(k.add(proj, n * d, x));
    if (l == c.recurrent_after) {
      const RecurrentWeights& r = model.recurrent();
      SIESTA_RETURN_IF_ERROR(k.rms_norm_block(x, r.norm, d, c.norm_eps, n, xn));
      SIESTA_RETURN_IF_ERROR(k.matmul_block(r.w_input, xn, d, d, n, q));
      SIESTA_RETURN_IF_ERROR(k.matmul_block(r.w_gate, xn, d, d, n, kk));
      SIESTA_RETURN_IF_ERROR(k.recurrent_scan(q, kk, d, n, state, states));
      SIESTA_RETURN_IF_ERROR(k.matmul_block(r.w_out, states, d, d, n, proj));
      SIESTA_RETURN_IF_ERROR(k.add(proj, n * d, x));
    }
  }
  // The last token only: its logits and greedy choice, into the slots the decode step uses.
  const DeviceAddress last = x + uint64_t{n - 1} * d * sizeof(float);
  SIESTA_RETURN_IF_ERROR(k.rms_norm(last, model.final_norm(), d, c.norm_eps, xn));
  SIESTA_RETURN_IF_ERROR(k.matmul(model.output(), xn, kVocabSize, d, logits));
  return k.argmax(logits, kFirstPrintable, kLastPrintable, next);
}

}  // namespace siesta::engine
