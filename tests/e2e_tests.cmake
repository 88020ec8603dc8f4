# siesta-server end to end: the real binary on a loopback port (label e2e). About 35 s together
# on a 2-core machine, most of it the real idle/expiry timers (1 s / 3 s) and the race test's
# idle rounds; the hostile-directory tests (FIFOs, a replayed snapshot, damaged slot files)
# sleep the session explicitly, with no timers; the HTTP layer against hostile clients (1 s
# deadlines) and the stop signals (a prefill of synthetic:large interrupted) take ~10 s.
if(NOT TARGET siesta_server_lib)
  return()  # built without cpp-httplib (SIESTA_STRICT_DEPS=OFF said so at configure time)
endif()

# The fixture starts the real binary, so the tests depend on it being built; with it come the
# raw-socket client (SSE read incrementally, abrupt disconnects) and the OpenAI helpers.
add_library(siesta_e2e_server_process STATIC
  e2e/server_process.cc e2e/raw_http.cc e2e/openai_client.cc e2e/web_browser.cc)
target_link_libraries(siesta_e2e_server_process
  PUBLIC siesta_options siesta_test_support siesta_httplib nlohmann_json::nlohmann_json
  PRIVATE OpenSSL::Crypto)
target_compile_definitions(siesta_e2e_server_process
  PUBLIC SIESTA_SERVER_BINARY="$<TARGET_FILE:siesta-server>"
         SIESTA_TEST_ARTIFACTS="${CMAKE_BINARY_DIR}/test-artifacts")
add_dependencies(siesta_e2e_server_process siesta-server)

siesta_test_binary(e2e_tests LABELS e2e LIBS siesta_e2e_server_process
  PCH <nlohmann/json.hpp> <httplib.h>)
siesta_test_sources(e2e_tests LABELS e2e SOURCES
  e2e/server_flags_e2e_test.cc e2e/server_lifecycle_e2e_test.cc e2e/server_crash_e2e_test.cc
  e2e/server_race_e2e_test.cc e2e/server_api_e2e_test.cc e2e/server_files_e2e_test.cc
  e2e/server_http_e2e_test.cc e2e/server_signals_e2e_test.cc)
siesta_test_sources(e2e_tests LABELS e2e concurrency SOURCES e2e/server_status_e2e_test.cc)
# Several conversations over fewer sessions, routed by prompt_cache_key.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_sessions_e2e_test.cc)
# A conversation restores only its own snapshot and is reached only by its own key.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_ownership_e2e_test.cc)
# llama-server's native POST /completion: answers, the stream, refusals, slots and the key.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_llama_completion_e2e_test.cc)
# --cors-origin: a listed origin's answers carry CORS headers, its preflight needs no key.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_cors_e2e_test.cc)
# Anthropic's Messages API: shapes, the event sequence, cache reads, errors, count_tokens, auth.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_anthropic_e2e_test.cc)
# llama-server's tokenize/detokenize/apply-template, /props (is_sleeping), /slots, their keys.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_llama_api_e2e_test.cc)
# OpenAI's fields: model ids, --n-predict, logprobs, logit_bias, fingerprints, refusals by name.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_openai_fields_e2e_test.cc)
# OpenAI's Responses API: chains across an offload, GET/DELETE, the event sequence, errors, auth.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_responses_e2e_test.cc)
# The RAM tier: a conversation waits in host memory and returns; too small a budget: disk.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_ram_tier_e2e_test.cc)
# The snapshot directory's budget: within it after every request, the deleted read again.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_disk_budget_e2e_test.cc)
# The web page at /: its files over HTTP, then in headless Chromium (WebDriver), screenshots
# kept under the build's test-artifacts/webui/.
siesta_test_sources(e2e_tests LABELS e2e SOURCES e2e/server_webui_e2e_test.cc)
# Conversations across a restart: SIGTERM and kill -9, refusals, damaged files, key files (under
# TSan too: the exit save runs beside the server's background saves).
siesta_test_sources(e2e_tests LABELS e2e concurrency SOURCES e2e/server_restart_e2e_test.cc)
siesta_finish_test_binary(e2e_tests)
