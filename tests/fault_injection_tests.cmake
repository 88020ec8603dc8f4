# Fault injection: the fault-injecting wrappers themselves (testing/), the snapshot write
# protocol at every failing call and crash point, and the Offloader's fault matrix. Every
# injected error says "injected" and the plan that fired.
siesta_test_binary(fault_injection_tests LABELS fault_injection LIBS siesta_backend_sim)
siesta_test_sources(fault_injection_tests LABELS fault_injection SOURCES
  fault_injection/faulty_file_system_test.cc fault_injection/snapshot_write_faults_test.cc
  fault_injection/offloader_fault_matrix_test.cc)
siesta_test_sources(fault_injection_tests LABELS fault_injection concurrency SOURCES
  fault_injection/faulty_backend_test.cc)
if(TARGET fault_injection_tests)
  # The fault matrix compares its table with the one docs/TESTING.md holds.
  target_compile_definitions(fault_injection_tests PRIVATE SIESTA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
siesta_finish_test_binary(fault_injection_tests)
