// The decode step, recorded once per session: embed the token of StepParams, run every block
// (and the recurrent block after block recurrent_after), final norm, logits, and the greedy
// argmax over the printable tokens into the scratch `next` slot. Every address is bound at
// recording time: the graph is valid only while the session's memory stays at `base`.
//
// Thread rule: the engine thread (it drives `kernels`).
#pragma once

#include <memory>

#include "compute/kernels.h"
#include "core/base/status.h"
#include "core/memory/memory_backend.h"
#include "engine/model.h"
#include "engine/session_layout.h"

namespace siesta::engine {

// Success: the recorded graph. Failure: the kernels' errors (capture is over either way).
// REQUIRES: `kernels` is not capturing.
Result<std::unique_ptr<KernelGraph>> record_decode_graph(Kernels& kernels, const Model& model,
                                                         const SessionLayout& layout,
                                                         DeviceAddress base);

}  // namespace siesta::engine
