# siesta-server e2e lifecycle tests: the real binary on a loopback port (label e2e)
if(NOT TARGET siesta_server_lib)
  return()
endif()

# The fixture library (siesta_e2e_server_process, declared in server_tests.cmake) gains the
# raw-socket client (SSE read incrementally, abrupt disconnects) and the OpenAI helpers.
target_sources(siesta_e2e_server_process PRIVATE e2e/raw_http.cc e2e/openai_client.cc)
target_link_libraries(siesta_e2e_server_process PUBLIC nlohmann_json::nlohmann_json)

# ~35 s together on a 2-core machine, most of it the real idle/expiry timers (1 s / 3 s) and
# the race test's 14 idle rounds.
foreach(test IN ITEMS server_lifecycle_e2e_test server_crash_e2e_test server_race_e2e_test
                      server_api_e2e_test)
  siesta_add_gtest(${test} SOURCES e2e/${test}.cc LABELS e2e
                   LIBS siesta_e2e_server_process nlohmann_json::nlohmann_json)
endforeach()
# The HTTP layer against hostile clients (deadlines of 1 s) and the stop signals (a prefill of
# synthetic:large interrupted): ~10 s together.
foreach(test IN ITEMS server_http_e2e_test server_signals_e2e_test)
  siesta_add_gtest(${test} SOURCES e2e/${test}.cc LABELS e2e
                   LIBS siesta_e2e_server_process nlohmann_json::nlohmann_json)
endforeach()
