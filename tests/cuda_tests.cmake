# CUDA VMM backend tests.
#   unit: the driver table and the no-driver path; they run everywhere, CI included. (The
#         backend's bookkeeping, core/memory/range_ledger.h, is tested with core.)
#   gpu:  the real backend on a device; each test skips, printing why, where CUDA is
#         unavailable. Never run by CI.

if(NOT SIESTA_HAVE_CUDA)
  return()
endif()

siesta_add_gtest(cuda_driver_unavailable_test
  SOURCES unit/cuda_driver_unavailable_test.cc
  LABELS unit LIBS siesta_backend_cuda)

# Resolves the driver table against the toolkit's stub libcuda.so (no driver needed).
find_file(SIESTA_CUDA_STUB_LIBRARY libcuda.so
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR}
  PATH_SUFFIXES stubs lib64/stubs lib/stubs NO_DEFAULT_PATH)
if(NOT SIESTA_CUDA_STUB_LIBRARY)
  set(SIESTA_CUDA_STUB_LIBRARY "")  # the test skips, saying so
endif()
siesta_add_gtest(cuda_driver_api_test
  SOURCES unit/cuda_driver_api_test.cc
  LABELS unit LIBS siesta_backend_cuda)
target_include_directories(cuda_driver_api_test SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(cuda_driver_api_test PRIVATE
  SIESTA_CUDA_STUB_LIBRARY="${SIESTA_CUDA_STUB_LIBRARY}")

siesta_add_gtest(cuda_vmm_backend_test
  SOURCES gpu/cuda_vmm_backend_test.cc
  LABELS gpu LIBS siesta_backend_cuda)
target_include_directories(cuda_vmm_backend_test SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})

# The generic MemoryBackend conformance suite on the CUDA backend.
siesta_add_gtest(cuda_backend_conformance_test
  SOURCES gpu/cuda_backend_conformance_test.cc
  LABELS gpu LIBS siesta_backend_cuda)
target_include_directories(cuda_backend_conformance_test SYSTEM PRIVATE
  ${CUDAToolkit_INCLUDE_DIRS})

# CudaKernels (backends/cuda_vmm/cuda_kernels.h).
#   unit: create() on a machine without a GPU fails cleanly (and the binary starts at all).
#   gpu:  every kernel against tests/support/reference_kernels.h; graphs, determinism, and a
#         graph replayed after decommit + commit at the same address.
siesta_add_gtest(cuda_kernels_unavailable_test
  SOURCES unit/cuda_kernels_unavailable_test.cc
  LABELS unit LIBS siesta_kernels_cuda siesta_backend_cuda)
siesta_add_gtest(cuda_kernels_test
  SOURCES gpu/cuda_kernels_test.cc
  LABELS gpu LIBS siesta_kernels_cuda siesta_backend_cuda)
siesta_add_gtest(cuda_kernel_graph_test
  SOURCES gpu/cuda_kernel_graph_test.cc
  LABELS gpu LIBS siesta_kernels_cuda siesta_backend_cuda)

# The engine on the GPU with idle offload on: same bytes as with it off, memory released.
siesta_add_gtest(cuda_engine_offload_test
  SOURCES gpu/cuda_engine_offload_test.cc
  LABELS gpu LIBS siesta_engine siesta_kernels_cuda siesta_backend_cuda)
target_include_directories(cuda_engine_offload_test SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})

# An engine::Session driven directly under an Offloader on the GPU: every used byte, address
# and range start back after each restore; out of memory on restore, then success; the device
# healthy (and its free memory back) after many cycles.
siesta_add_gtest(cuda_session_offload_test
  SOURCES gpu/cuda_session_offload_test.cc
  LABELS gpu LIBS siesta_engine siesta_kernels_cuda siesta_backend_cuda)
target_include_directories(cuda_session_offload_test SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
