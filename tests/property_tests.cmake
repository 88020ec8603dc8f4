# Property tests (RapidCheck; each prints its seed and case count): the simulator against a
# model, snapshot files against damage, the Offloader against a model of its state machine,
# the real engine with offload against the same engine without it, and prompts cut into random
# prefill blocks against one token at a time. At least 1000 sequences
# each in CI for the offloader and the engine.
siesta_test_binary(property_tests LABELS property LIBS siesta_runtime PROPERTY)
siesta_test_sources(property_tests LABELS property concurrency SOURCES
  property/sim_backend_model_property_test.cc)
siesta_test_sources(property_tests LABELS property SOURCES property/snapshot_property_test.cc)
siesta_test_sources(property_tests LABELS property ENVIRONMENT "RC_PARAMS=max_success=1000"
  SOURCES property/offloader_model_property_test.cc)
siesta_test_sources(property_tests LABELS property
  ENVIRONMENT "RC_PARAMS=max_success=1000 max_size=40"
  SOURCES property/engine_offload_property_test.cc)
siesta_test_sources(property_tests LABELS property ENVIRONMENT "RC_PARAMS=max_success=200"
  SOURCES property/prefill_split_property_test.cc)
# Several conversations over fewer sessions against a never-offloading engine.
siesta_test_sources(property_tests LABELS property
  ENVIRONMENT "RC_PARAMS=max_success=1000 max_size=30"
  SOURCES property/engine_sessions_property_test.cc)
siesta_finish_test_binary(property_tests)
