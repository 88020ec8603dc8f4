# Warnings and sanitizers for siesta's own targets (not for dependencies). Installed as
# siesta::options with only the include directory: a program built against the installed
# package gets siesta's headers, never its warnings or sanitizers (cmake/SiestaInstall.cmake).
add_library(siesta_options INTERFACE)
target_include_directories(siesta_options INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/siesta>)
set(_siesta_warnings -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wimplicit-fallthrough)
if(SIESTA_WERROR)
  list(APPEND _siesta_warnings -Werror)
endif()
list(JOIN _siesta_warnings "$<SEMICOLON>" _siesta_warnings)
target_compile_options(siesta_options INTERFACE
  "$<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:${_siesta_warnings}>>")

# The CI presets build in unity batches (CMAKE_UNITY_BUILD: a batch file includes eight source
# files, so the headers and templates they share are compiled once, not eight times). GCC then
# takes each included source file for a header and warns of a class in it holding a type from
# its anonymous namespace (-Wsubobject-linkage), which is right in a source file.
if(CMAKE_UNITY_BUILD AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(siesta_options INTERFACE
    $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>>)
endif()

# Clang checks the locking rules written with core/base/thread_annotations.h (which mutex
# guards a member, which a function needs held) on every build it makes -- the fuzz preset
# compiles every library with it in CI -- and a broken rule fails that build.
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  target_compile_options(siesta_options INTERFACE
    "$<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety$<SEMICOLON>-Werror=thread-safety>>")
endif()

if(SIESTA_SANITIZE)
  string(REPLACE ";" "," _siesta_sanitizers "${SIESTA_SANITIZE}")
  set(_siesta_san_flags -fsanitize=${_siesta_sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  list(JOIN _siesta_san_flags "$<SEMICOLON>" _siesta_san_joined)
  target_compile_options(siesta_options INTERFACE
    "$<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:${_siesta_san_joined}>>")
  target_link_options(siesta_options INTERFACE "$<BUILD_INTERFACE:${_siesta_san_joined}>")
  # Tests can ask which sanitizer they run under (death tests and RSS figures differ).
  target_compile_definitions(siesta_options INTERFACE
    $<BUILD_INTERFACE:SIESTA_SANITIZERS="${_siesta_sanitizers}">)
endif()

if(SIESTA_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "siesta: SIESTA_FUZZ needs clang (libFuzzer); use the fuzz preset")
  endif()
  # Coverage instrumentation for everything the fuzz targets reach; the targets themselves
  # link libFuzzer (tests/fuzz_tests.cmake).
  target_compile_options(siesta_options INTERFACE
    $<BUILD_INTERFACE:$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>>)
endif()
