# The idle offloader (core/offload/offloader.h): its transitions, races and faults, on the simulator
# with a FakeOffloadTarget (tests/support/fake_offload_target.h), so that they need no model.
siesta_add_gtest(executor_test SOURCES unit/executor_test.cc LABELS unit concurrency
                 LIBS)
# The state table, walked pair by pair against the one docs/ARCHITECTURE.md documents.
siesta_add_gtest(offload_machine_test SOURCES unit/offload_machine_test.cc LABELS unit LIBS)
target_compile_definitions(offload_machine_test PRIVATE SIESTA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
siesta_add_gtest(offloader_test SOURCES unit/offloader_test.cc LABELS unit
                 LIBS siesta_backend_sim)
siesta_add_gtest(offloader_race_test SOURCES unit/offloader_race_test.cc LABELS unit concurrency
                 LIBS siesta_backend_sim)
# At least 1000 command sequences in CI (issue "The idle offloader").
siesta_add_gtest(offloader_model_property_test
  SOURCES property/offloader_model_property_test.cc
  LABELS property LIBS siesta_backend_sim PROPERTY
  ENVIRONMENT "RC_PARAMS=max_success=1000")
siesta_add_gtest(offloader_fault_matrix_test
  SOURCES fault_injection/offloader_fault_matrix_test.cc
  LABELS fault_injection LIBS siesta_backend_sim)
