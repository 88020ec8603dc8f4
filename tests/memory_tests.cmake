# Memory backend tests: the conformance suite on the simulator (bare and behind a transparent
# FaultyBackend), the simulator's own behaviour, HostVmm, fault injection and a model-based
# property test. Everything on the simulator runs a worker thread (the simulated device
# stream), so those binaries also carry the `concurrency` label that the ThreadSanitizer
# build runs.
siesta_add_gtest(sim_backend_conformance_test
  SOURCES unit/sim_backend_conformance_test.cc
  LABELS unit concurrency
  LIBS siesta_backend_sim)

siesta_add_gtest(sim_backend_test
  SOURCES unit/sim_backend_test.cc
  LABELS unit concurrency
  LIBS siesta_backend_sim)

siesta_add_gtest(host_vmm_test
  SOURCES unit/host_vmm_test.cc
  LABELS unit
  LIBS)

siesta_add_gtest(faulty_backend_test
  SOURCES fault_injection/faulty_backend_test.cc
  LABELS fault_injection concurrency
  LIBS siesta_backend_sim)

siesta_add_gtest(sim_backend_model_property_test
  SOURCES property/sim_backend_model_property_test.cc
  LABELS property concurrency
  LIBS siesta_backend_sim
  PROPERTY)
