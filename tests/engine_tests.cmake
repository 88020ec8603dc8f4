# engine: the model configuration table, the byte tokenizer, and the Session on the simulator
# (HostKernels over SimBackend).
siesta_add_gtest(model_config_test SOURCES unit/model_config_test.cc LABELS unit
                 LIBS siesta_engine)
siesta_add_gtest(tokenizer_test SOURCES unit/tokenizer_test.cc LABELS unit
                 LIBS siesta_engine)
siesta_add_gtest(session_test SOURCES unit/session_test.cc LABELS unit
                 LIBS siesta_engine siesta_backend_sim)
siesta_add_gtest(session_memory_test SOURCES unit/session_memory_test.cc LABELS unit
                 LIBS siesta_engine siesta_backend_sim)
siesta_add_gtest(model_test SOURCES unit/model_test.cc LABELS unit
                 LIBS siesta_engine siesta_backend_sim)
