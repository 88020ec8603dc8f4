# Fuzz targets. Every build replays each target's checked-in corpus (label `fuzz`, no clang
# needed). The `fuzz` preset (clang, SIESTA_FUZZ=ON) links the same targets with libFuzzer
# and runs each for a bounded time; libFuzzer prints the seed it used ("INFO: Seed: N"), and
# SIESTA_FUZZ_SECONDS bounds the run.

set(SIESTA_FUZZ_SECONDS 20 CACHE STRING "Seconds each libFuzzer target runs in the fuzz preset")

# siesta_add_fuzz(<name> SOURCE file LIBS ... CORPUS dir)
function(siesta_add_fuzz name)
  cmake_parse_arguments(ARG "" "SOURCE;CORPUS" "LIBS" ${ARGN})
  if(SIESTA_FUZZ)
    add_executable(${name} ${ARG_SOURCE})
    target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
    target_link_options(${name} PRIVATE -fsanitize=fuzzer)
    set(new_inputs "${CMAKE_CURRENT_BINARY_DIR}/${name}_corpus")
    file(MAKE_DIRECTORY "${new_inputs}")
    # New inputs go to the build tree (the first directory), never into the source corpus.
    add_test(NAME ${name}.libfuzzer
             COMMAND ${name} -max_total_time=${SIESTA_FUZZ_SECONDS} -timeout=10
                     -print_final_stats=1 "${new_inputs}" "${ARG_CORPUS}")
    set_tests_properties(${name}.libfuzzer PROPERTIES LABELS fuzz)
  else()
    add_executable(${name} ${ARG_SOURCE} fuzz/replay_main.cc)
    add_test(NAME ${name}.replay COMMAND ${name} "${ARG_CORPUS}")
    set_tests_properties(${name}.replay PROPERTIES LABELS fuzz)
  endif()
  target_link_libraries(${name} PRIVATE siesta_options siesta_test_support ${ARG_LIBS})
endfunction()

if(TARGET siesta_server_lib)
  siesta_add_fuzz(server_flags_fuzz SOURCE fuzz/server_flags_fuzz.cc LIBS siesta_server_lib
                  CORPUS "${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/server_flags")
endif()

# The snapshot reader over arbitrary bytes; the corpus holds valid files of every mode, written
# by tests/unit/snapshot_refusal_test.cc (SnapshotFuzzCorpus) with SIESTA_WRITE_FUZZ_CORPUS set.
siesta_add_fuzz(snapshot_reader_fuzz SOURCE fuzz/snapshot_reader_fuzz.cc LIBS
                CORPUS "${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/snapshot_reader")

# The route a restart decodes from each adopted snapshot's header (engine/conversation_route.h).
siesta_add_fuzz(conversation_route_fuzz SOURCE fuzz/conversation_route_fuzz.cc LIBS siesta_engine
                CORPUS "${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/conversation_route")
