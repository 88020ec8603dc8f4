# Property tests (RapidCheck; each prints its seed and case count): the simulator against a
# model, snapshot files against damage, the Offloader against a model of its state machine,
# the real engine with offload against the same engine without it, and prompts cut into random
# prefill blocks against one token at a time. 1000 sequences in CI for the engine; 500 for the
# Offloader, whose sequences also write ahead, evict and forget with delta saves on, each save
# synced to disk (about 10-15 s on 2 cores, as 1000 took before those were added).
# Under a sanitizer (a Debug, instrumented build: the real engine runs ~20 x slower) the three
# properties that drive the real engine run a quarter of their cases: the ci preset runs them
# all, and what the sanitizer looks for (memory errors, undefined behaviour) shows on the
# paths a quarter already takes. That keeps the asan preset's tests near 4 minutes on 2 cores.
if(SIESTA_SANITIZE)
  set(siesta_engine_cases_divisor 4)
else()
  set(siesta_engine_cases_divisor 1)
endif()
math(EXPR siesta_offload_cases "1000 / ${siesta_engine_cases_divisor}")
math(EXPR siesta_split_cases "200 / ${siesta_engine_cases_divisor}")
math(EXPR siesta_sessions_cases "1000 / ${siesta_engine_cases_divisor}")
math(EXPR siesta_restart_cases "300 / ${siesta_engine_cases_divisor}")

siesta_test_binary(property_tests LABELS property LIBS siesta_runtime PROPERTY)
siesta_test_sources(property_tests LABELS property concurrency SOURCES
  property/sim_backend_model_property_test.cc)
siesta_test_sources(property_tests LABELS property SOURCES property/snapshot_property_test.cc)
siesta_test_sources(property_tests LABELS property ENVIRONMENT "RC_PARAMS=max_success=500"
  SOURCES property/offloader_model_property_test.cc)
# The Offloader with a RAM tier of random budget, its pages refused at random.
siesta_test_sources(property_tests LABELS property ENVIRONMENT "RC_PARAMS=max_success=300"
  SOURCES property/offloader_ram_property_test.cc)
siesta_test_sources(property_tests LABELS property
  ENVIRONMENT "RC_PARAMS=max_success=${siesta_offload_cases} max_size=40"
  SOURCES property/engine_offload_property_test.cc)
siesta_test_sources(property_tests LABELS property ENVIRONMENT "RC_PARAMS=max_success=${siesta_split_cases}"
  SOURCES property/prefill_split_property_test.cc)
# Several conversations over fewer sessions against a never-offloading engine.
siesta_test_sources(property_tests LABELS property
  ENVIRONMENT "RC_PARAMS=max_success=${siesta_sessions_cases} max_size=30"
  SOURCES property/engine_sessions_property_test.cc)
# Conversations across clean and crashing restarts against a never-restarting engine.
siesta_test_sources(property_tests LABELS property
  ENVIRONMENT "RC_PARAMS=max_success=${siesta_restart_cases} max_size=30"
  SOURCES property/engine_restart_property_test.cc)
siesta_finish_test_binary(property_tests)
