# siesta-server: flags, offload config rules, the status and metrics bodies, the app, the snapshot directory, and
# the real binary driven over HTTP (e2e).

# The offload flag rules are core's and build everywhere, the GPU machine included.
siesta_add_gtest(offload_config_test SOURCES unit/offload_config_test.cc LABELS unit
                 LIBS)

if(NOT TARGET siesta_server_lib)
  return()  # built without cpp-httplib (SIESTA_STRICT_DEPS=OFF said so at configure time)
endif()

siesta_add_gtest(server_flags_test SOURCES unit/server_flags_test.cc LABELS unit
                 LIBS siesta_server_lib)
siesta_add_gtest(status_json_test SOURCES unit/status_json_test.cc LABELS unit
                 LIBS siesta_server_lib)
siesta_add_gtest(metrics_text_test SOURCES unit/metrics_text_test.cc LABELS unit
                 LIBS siesta_server_lib)
# ServerApp over the simulator: engine, offloader, status without waking, cancel tokens.
siesta_add_gtest(server_app_test SOURCES unit/server_app_test.cc LABELS unit concurrency
                 LIBS siesta_server_lib)
siesta_add_gtest(cache_dir_test SOURCES unit/cache_dir_test.cc LABELS unit
                 LIBS siesta_server_lib)
# A slot file's failures as the client sees them: 4xx for what the file is, no server path.
siesta_add_gtest(slot_error_test SOURCES unit/slot_error_test.cc LABELS unit
                 LIBS siesta_server_lib)
# Threads meet in these (stop() racing run(), the signal thread), so the ThreadSanitizer
# build runs them too (label `concurrency`).
siesta_add_gtest(http_server_test SOURCES unit/http_server_test.cc LABELS unit concurrency
                 LIBS siesta_server_lib)
siesta_add_gtest(stop_signals_test SOURCES unit/stop_signals_test.cc LABELS unit concurrency
                 LIBS siesta_server_lib)

# The e2e fixture starts the real binary; the tests depend on it being built.
add_library(siesta_e2e_server_process STATIC e2e/server_process.cc)
target_link_libraries(siesta_e2e_server_process
  PUBLIC siesta_options siesta_test_support siesta_httplib)
target_compile_definitions(siesta_e2e_server_process
  PUBLIC SIESTA_SERVER_BINARY="$<TARGET_FILE:siesta-server>")
add_dependencies(siesta_e2e_server_process siesta-server)

siesta_add_gtest(server_flags_e2e_test SOURCES e2e/server_flags_e2e_test.cc LABELS e2e
                 LIBS siesta_e2e_server_process)
siesta_add_gtest(server_status_e2e_test SOURCES e2e/server_status_e2e_test.cc
                 LABELS e2e concurrency LIBS siesta_e2e_server_process nlohmann_json::nlohmann_json)
