# engine: the command loop (generate, reset, export/import, status), stop strings, sampling.
siesta_add_gtest(stop_matcher_test SOURCES unit/stop_matcher_test.cc LABELS unit
                 LIBS siesta_engine)
siesta_add_gtest(sampler_test SOURCES unit/sampler_test.cc LABELS unit
                 LIBS siesta_engine)
siesta_add_gtest(engine_test SOURCES unit/engine_test.cc LABELS unit
                 LIBS siesta_engine siesta_backend_sim)
# A cancel during a long prefill ends it within a step, whatever the device has queued.
siesta_add_gtest(engine_prefill_cancel_test SOURCES unit/engine_prefill_cancel_test.cc
                 LABELS unit concurrency LIBS siesta_engine siesta_backend_sim)
siesta_add_gtest(engine_export_test SOURCES unit/engine_export_test.cc LABELS unit
                 LIBS siesta_engine siesta_backend_sim)
# Threads: also run by the ThreadSanitizer preset.
siesta_add_gtest(engine_concurrency_test SOURCES unit/engine_concurrency_test.cc
                 LABELS unit concurrency LIBS siesta_engine siesta_backend_sim)
siesta_add_gtest(engine_fault_test SOURCES unit/engine_fault_test.cc
                 LABELS unit fault_injection LIBS siesta_engine siesta_backend_sim)
# The engine with idle offload on: same bytes as with it off, fallbacks, out of memory.
siesta_add_gtest(engine_offload_test SOURCES unit/engine_offload_test.cc LABELS unit
                 LIBS siesta_engine siesta_backend_sim)
# Idle offload with the real engine against an engine with it off (RapidCheck, 1000 sequences).
siesta_add_gtest(engine_offload_property_test
  SOURCES property/engine_offload_property_test.cc
  LABELS property LIBS siesta_engine siesta_backend_sim PROPERTY
  ENVIRONMENT "RC_PARAMS=max_success=1000 max_size=40")
