# CUDA VMM backend and kernels.
#   unit: the driver table against the toolkit's stub libcuda.so, and the no-driver paths (the
#         binaries start and CudaVmmBackend / CudaKernels fail cleanly); they run everywhere,
#         CI included. (The backend's bookkeeping, core/memory/range_ledger.h, is tested with
#         core/memory.)
#   gpu:  the real backend, kernels, graphs and the engine's offload on a device; each test
#         skips, printing why, where CUDA is unavailable. Never run by CI.
if(NOT SIESTA_HAVE_CUDA)
  return()
endif()

# Resolves the driver table against the toolkit's stub libcuda.so (no driver needed).
find_file(SIESTA_CUDA_STUB_LIBRARY libcuda.so
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR}
  PATH_SUFFIXES stubs lib64/stubs lib/stubs NO_DEFAULT_PATH)
if(NOT SIESTA_CUDA_STUB_LIBRARY)
  set(SIESTA_CUDA_STUB_LIBRARY "")  # the test skips, saying so
endif()
set_source_files_properties(unit/cuda_driver_api_test.cc PROPERTIES
  COMPILE_DEFINITIONS "SIESTA_CUDA_STUB_LIBRARY=\"${SIESTA_CUDA_STUB_LIBRARY}\"")

siesta_test_binary(cuda_unit_tests LABELS unit LIBS siesta_kernels_cuda siesta_backend_cuda)
siesta_test_sources(cuda_unit_tests LABELS unit SOURCES
  unit/cuda_driver_unavailable_test.cc unit/cuda_driver_api_test.cc
  unit/cuda_kernels_unavailable_test.cc)
if(TARGET cuda_unit_tests)
  target_include_directories(cuda_unit_tests SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
endif()
siesta_finish_test_binary(cuda_unit_tests)

# On a device: the backend (and the generic MemoryBackend conformance suite on it), every
# kernel against tests/support/reference_kernels.h (the block operations against the
# single-token ones, bit for bit), graphs replayed after decommit + commit at the same address,
# the engine with offload on against offload off, prompts cut into random blocks against one
# token at a time (and against the host kernels), and an engine::Session under an Offloader
# (every used byte, address and range start back after each restore; out of memory on restore,
# then success; a healthy device after many cycles); a decommit waiting for the device (a host
# function that blocks) while another range commits.
siesta_test_binary(gpu_tests LABELS gpu
  LIBS siesta_runtime siesta_kernels_cuda siesta_backend_cuda siesta_backend_sim)
siesta_test_sources(gpu_tests LABELS gpu SOURCES
  gpu/cuda_vmm_backend_test.cc gpu/cuda_backend_conformance_test.cc gpu/cuda_kernels_test.cc
  gpu/cuda_block_kernels_test.cc gpu/cuda_kernel_graph_test.cc gpu/cuda_engine_offload_test.cc
  gpu/cuda_session_offload_test.cc gpu/cuda_prefill_test.cc gpu/cuda_many_sessions_test.cc
  gpu/cuda_decommit_concurrency_test.cc)
if(TARGET gpu_tests)
  target_include_directories(gpu_tests SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
endif()
siesta_finish_test_binary(gpu_tests)
