// The one rule of the device's primary context that spans the VMM backend and the CUDA
// kernels: a graph capture in progress on one thread and a context-wide synchronisation on
// another do not mix. cuCtxSynchronize waits for every stream of the context, the capturing
// one included, and a wait on a capturing stream invalidates the capture
// (cudaErrorStreamCaptureInvalidated), even in thread-local capture mode. With many
// conversations it happens: a session is created (its decode graph captured) on the engine
// thread while another session's background save synchronises before its copies.
//
// So every cuCtxSynchronize holds the gate shared, and a capture holds it exclusively from
// begin_capture() to end_capture() (recording a decode graph takes milliseconds; saves wait
// that long at most). The capturing thread calls nothing of the backend meanwhile (the kernels
// refuse uploads, downloads and synchronize while capturing), so the gate is never taken twice
// by one thread.
//
// Thread rule: any thread; one gate per process (the primary context is per process too).
#pragma once

#include <shared_mutex>

namespace siesta::cuda {

inline std::shared_mutex& primary_context_capture_gate() {
  static std::shared_mutex gate;
  return gate;
}

}  // namespace siesta::cuda
