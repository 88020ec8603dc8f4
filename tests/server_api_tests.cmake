# siesta-server's OpenAI API: request parsing and response bodies, the chat template, API key
# checks, the error mapping, request framing and the request policy (pure functions), and the
# routes driven over loopback HTTP in process with a real ServerApp on the simulator.
if(NOT TARGET siesta_server_lib)
  return()
endif()

foreach(test IN ITEMS openai_json_test chat_template_test auth_test api_error_test
                      request_head_test request_policy_test)
  siesta_add_gtest(${test} SOURCES unit/${test}.cc LABELS unit LIBS siesta_server_lib)
endforeach()
# Handler threads, the engine thread and the streaming queue meet here (label concurrency:
# the ThreadSanitizer build runs it too).
siesta_add_gtest(api_routes_test SOURCES unit/api_routes_test.cc LABELS unit concurrency
                 LIBS siesta_server_lib)
# The HTTP workers: threads started as requests need them (ThreadSanitizer runs it too).
siesta_add_gtest(worker_pool_test SOURCES unit/worker_pool_test.cc LABELS unit concurrency
                 LIBS siesta_server_lib)
