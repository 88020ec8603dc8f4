# Test binaries: one GoogleTest executable per layer or kind (fewer links and discovery runs
# than one per file), whose CTest test cases are labelled by the source file they come from.
#
#   siesta_test_binary(<name> LABELS <default labels> [LIBS ...] [PCH <header>...] [PROPERTY])
#     Declares the executable. PROPERTY: it links RapidCheck (and is skipped, with the property
#     tests, where RapidCheck is missing and SIESTA_STRICT_DEPS is off). PCH: heavy headers most
#     of its files include, precompiled with GoogleTest's (<nlohmann/json.hpp>, say).
#   siesta_test_sources(<name> LABELS ... [ENVIRONMENT NAME=value...] SOURCES ...)
#     Adds test files; every test case they define gets these labels (unit, property,
#     fault_injection, e2e, gpu, and concurrency for what the ThreadSanitizer preset runs) and
#     environment. Under ThreadSanitizer only files labelled `concurrency` are compiled at all:
#     the tsan preset runs nothing else.
#   siesta_finish_test_binary(<name>)
#     Registers the cases with CTest (gtest_discover_tests) and writes the file that labels them.
# Target settings beyond LIBS (include directories, definitions) go after the first
# siesta_test_sources() call, guarded by if(TARGET <name>): a binary that got no file has no target.
#
# A case is matched to its file by its test suite's name (TEST/TEST_F/TEST_P/TYPED_TEST_P/
# RC_GTEST_PROP first arguments, and INSTANTIATE_* prefixes), so a suite name must belong to
# one file of a binary; a case whose suite matches no file gets the binary's default labels.

function(siesta_test_binary name)
  cmake_parse_arguments(ARG "PROPERTY" "" "LABELS;LIBS;PCH" ${ARGN})
  if(ARG_PROPERTY AND NOT SIESTA_HAVE_RAPIDCHECK)
    return()
  endif()
  # The executable is made when its first file is added (under ThreadSanitizer a binary may
  # have none), with these settings.
  set_property(GLOBAL PROPERTY SIESTA_BINARY_${name} ON)
  set_property(GLOBAL PROPERTY SIESTA_BINARY_${name}_LIBS "${ARG_LIBS}")
  set_property(GLOBAL PROPERTY SIESTA_BINARY_${name}_PROPERTY "${ARG_PROPERTY}")
  set_property(GLOBAL PROPERTY SIESTA_BINARY_${name}_PCH "${ARG_PCH}")
  set_property(GLOBAL PROPERTY SIESTA_BINARY_${name}_LABELS "${ARG_LABELS}")
endfunction()

# Makes <name>'s executable if siesta_test_binary() declared it and it does not exist yet.
function(siesta_make_test_binary name)
  get_property(declared GLOBAL PROPERTY SIESTA_BINARY_${name})
  if(NOT declared OR TARGET ${name})
    return()
  endif()
  get_property(libs GLOBAL PROPERTY SIESTA_BINARY_${name}_LIBS)
  get_property(property GLOBAL PROPERTY SIESTA_BINARY_${name}_PROPERTY)
  get_property(labels GLOBAL PROPERTY SIESTA_BINARY_${name}_LABELS)
  get_property(pch GLOBAL PROPERTY SIESTA_BINARY_${name}_PCH)
  add_executable(${name})
  target_link_libraries(${name} PRIVATE siesta_options siesta_test_support ${libs}
                        GTest::gmock GTest::gtest_main)
  if(property)
    target_link_libraries(${name} PRIVATE rapidcheck rapidcheck_gtest)
  endif()
  # Build time (three quarters of a build's compiling is test files): where the code under test
  # is optimized, the test code itself is compiled for debugging (-Og: about 40 % less time per
  # file; the libraries it tests keep the preset's -O2), and the headers every test file
  # includes are parsed once per binary, not once per file (a precompiled header; off with
  # SIESTA_PCH=OFF, e.g. for a compiler cache that does not take them).
  target_compile_options(${name} PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-Og>)
  if(SIESTA_PCH)
    target_precompile_headers(${name} PRIVATE
      <gtest/gtest.h> <gmock/gmock.h>
      <atomic> <chrono> <filesystem> <functional> <future> <map> <memory> <mutex> <optional>
      <string> <thread> <vector>)
    if(property)
      target_precompile_headers(${name} PRIVATE <rapidcheck.h> <rapidcheck/gtest.h>)
    endif()
    if(pch)
      target_precompile_headers(${name} PRIVATE ${pch})
    endif()
  endif()
  set_property(TARGET ${name} PROPERTY SIESTA_DEFAULT_LABELS "${labels}")
  set_property(TARGET ${name} PROPERTY SIESTA_SUITE_MAP "")
  set_property(TARGET ${name} PROPERTY SIESTA_SUITES "")
endfunction()

function(siesta_test_sources name)
  cmake_parse_arguments(ARG "" "" "LABELS;ENVIRONMENT;SOURCES" ${ARGN})
  if(SIESTA_SANITIZE MATCHES "thread" AND NOT "concurrency" IN_LIST ARG_LABELS)
    return()
  endif()
  siesta_make_test_binary(${name})
  if(NOT TARGET ${name})
    return()  # not declared (its dependencies are missing)
  endif()
  target_sources(${name} PRIVATE ${ARG_SOURCES})
  # Lists are kept comma-separated in the map (whose entries are themselves a list).
  string(REPLACE ";" "," labels "${ARG_LABELS}")
  string(REPLACE ";" "," environment "${ARG_ENVIRONMENT}")
  foreach(source IN LISTS ARG_SOURCES)
    file(READ "${CMAKE_CURRENT_SOURCE_DIR}/${source}" text)
    # Suite names: the first argument of every test macro at the start of a line, and both
    # arguments of INSTANTIATE_* (its prefix and the suite it instantiates).
    string(REGEX MATCHALL
      "\n(TEST|TEST_F|TEST_P|TYPED_TEST|TYPED_TEST_P|RC_GTEST_PROP|RC_GTEST_FIXTURE_PROP)\\([ \t\r\n]*[A-Za-z0-9_]+"
      tests "\n${text}")
    string(REGEX MATCHALL
      "\nINSTANTIATE_TEST_SUITE_P\\([ \t\r\n]*[A-Za-z0-9_]+[ \t\r\n]*,[ \t\r\n]*[A-Za-z0-9_]+"
      instantiations "\n${text}")
    string(REGEX MATCHALL
      "\nINSTANTIATE_TYPED_TEST_SUITE_P\\([ \t\r\n]*[A-Za-z0-9_]+[ \t\r\n]*,[ \t\r\n]*[A-Za-z0-9_]+"
      typed_instantiations "\n${text}")
    set(suites "")
    foreach(match IN LISTS tests)
      string(REGEX REPLACE ".*\\([ \t\r\n]*" "" suite "${match}")
      list(APPEND suites "${suite}")
    endforeach()
    # gtest_discover_tests names a value-parameterized test "<prefix>/<suite>.<test>/<n>" (the
    # pair identifies the file) and a typed one "<prefix>.<test><<type>>" (only the prefix does).
    foreach(match IN LISTS instantiations)
      string(REGEX REPLACE ".*\\([ \t\r\n]*([A-Za-z0-9_]+)[ \t\r\n]*,[ \t\r\n]*([A-Za-z0-9_]+)"
             "\\1/\\2" pair "${match}")
      list(APPEND suites "${pair}")
    endforeach()
    foreach(match IN LISTS typed_instantiations)
      string(REGEX REPLACE ".*\\([ \t\r\n]*([A-Za-z0-9_]+)[ \t\r\n]*,.*" "\\1" prefix "${match}")
      list(APPEND suites "${prefix}")
    endforeach()
    list(REMOVE_DUPLICATES suites)
    if(NOT suites)
      message(FATAL_ERROR "${source}: no test suite found (siesta_test_sources of ${name})")
    endif()
    get_target_property(known ${name} SIESTA_SUITES)
    foreach(suite IN LISTS suites)
      set(entry "${suite}=${labels}|${environment}")
      if(entry IN_LIST known)
        continue()  # the same suite in two files with the same labels
      endif()
      foreach(other IN LISTS known)
        if(other MATCHES "^${suite}=")
          message(FATAL_ERROR "${source}: test suite (or instantiation prefix) '${suite}' is also "
                              "defined, with other labels, by another file of ${name}; rename "
                              "one so that labels stay exact")
        endif()
      endforeach()
      set_property(TARGET ${name} APPEND PROPERTY SIESTA_SUITES "${entry}")
      set_property(TARGET ${name} APPEND PROPERTY SIESTA_SUITE_MAP
                   "set(siesta_labels_${suite} \"${labels}\")\nset(siesta_env_${suite} \"${environment}\")\n")
    endforeach()
  endforeach()
endfunction()

function(siesta_finish_test_binary name)
  if(NOT TARGET ${name})
    return()
  endif()
  # A GTEST_SKIP() shows as "Skipped" in CTest's summary, with its reason in the output.
  gtest_discover_tests(${name}
    PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED "
    DISCOVERY_TIMEOUT 60)
  get_target_property(map ${name} SIESTA_SUITE_MAP)
  get_target_property(default_labels ${name} SIESTA_DEFAULT_LABELS)
  string(REPLACE ";" "" map "${map}")
  string(REPLACE ";" "," default_labels "${default_labels}")
  # Included by CTest after the discovered tests (listed in <name>_TESTS). Labels set through
  # gtest_discover_tests' PROPERTIES would be flattened: every label after the first would be
  # read as a property name.
  set(labels_file "${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake")
  file(WRITE "${labels_file}" "${map}
foreach(test IN LISTS ${name}_TESTS)
  string(REGEX REPLACE \"\\\\..*\" \"\" head \"\${test}\")
  string(REPLACE \"/\" \";\" parts \"\${head}\")
  list(LENGTH parts count)
  set(key \"\")
  if(count GREATER 1)
    list(GET parts 0 first)
    list(GET parts 1 second)
    if(DEFINED siesta_labels_\${first}/\${second})
      set(key \"\${first}/\${second}\")
    endif()
  endif()
  if(NOT key)
    foreach(part IN LISTS parts)
      if(NOT key AND DEFINED siesta_labels_\${part})
        set(key \"\${part}\")
      endif()
    endforeach()
  endif()
  if(key)
    string(REPLACE \",\" \";\" labels \"\${siesta_labels_\${key}}\")
    string(REPLACE \",\" \";\" environment \"\${siesta_env_\${key}}\")
  else()
    string(REPLACE \",\" \";\" labels \"${default_labels}\")
    set(environment \"\")
  endif()
  if(environment)
    set_tests_properties(\"\${test}\" PROPERTIES LABELS \"\${labels}\" ENVIRONMENT \"\${environment}\")
  else()
    set_tests_properties(\"\${test}\" PROPERTIES LABELS \"\${labels}\")
  endif()
endforeach()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_file}")
endfunction()
