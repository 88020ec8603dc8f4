# Kernel tests: HostKernels (backends/sim) against the plain reference kernels of
# tests/support/reference_kernels.h, the f16 conversions, and graph capture/replay across a
# decommit. The kernels run on the simulator's worker thread, hence `concurrency` too.
siesta_add_gtest(host_kernels_test
  SOURCES unit/host_kernels_test.cc
  LABELS unit concurrency
  LIBS siesta_backend_sim)
