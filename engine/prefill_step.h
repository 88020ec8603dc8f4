// The prefill step: a block of `count` prompt tokens, already in the scratch `tokens` buffer,
// at positions [position, position + count), through every block of the model as
// matrix-matrix work (the block operations of compute/kernels.h), their K and V rows stored at
// once and the recurrent state scanned through them; then the final norm, the logits and the
// greedy argmax of the last token into the scratch `logits` and `next` slots, as the decode
// step leaves them. Every row gets the bits the decode graph (engine/decode_graph.h) gives
// that token, so a prompt's KV, recurrent states and next token do not depend on the blocks
// it was cut into. The recurrent state after row i is left in the scratch `states` row i.
//
// Operations are enqueued with the addresses of `base` now (nothing is recorded).
// Thread rule: the engine thread (it drives `kernels`).
#pragma once

#include <cstdint>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "engine/model.h"
#include "engine/session_layout.h"

namespace siesta::engine {

// Failure: the kernels' errors (what was enqueued before the failing operation still runs).
// REQUIRES: 1 <= count <= layout.buffers.rows; position + count <= the context.
Status enqueue_prefill_step(Kernels& kernels, const Model& model, const SessionLayout& layout,
                            DeviceAddress base, uint32_t position, uint32_t count);

}  // namespace siesta::engine
