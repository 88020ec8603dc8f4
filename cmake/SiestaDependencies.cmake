# Finds every dependency once. With SIESTA_STRICT_DEPS (the default, and CI), anything missing
# stops the configure with the package that provides it; without it, the parts that need it
# are skipped and the reason is printed (the GPU machine has no cpp-httplib or RapidCheck).

function(siesta_missing what debian_package needed_by)
  if(SIESTA_STRICT_DEPS)
    message(FATAL_ERROR "siesta: ${what} not found (Debian package: ${debian_package}); "
                        "${needed_by} needs it. Run scripts/install-deps.")
  else()
    message(WARNING "siesta: ${what} not found (Debian package: ${debian_package}); "
                    "skipping ${needed_by}.")
  endif()
endfunction()

find_package(Threads REQUIRED)
find_package(OpenSSL 3 REQUIRED)           # the snapshot seal (core)
find_package(nlohmann_json 3 REQUIRED)     # status JSON, configs

# ---- CUDA -------------------------------------------------------------------------------------
set(SIESTA_HAVE_CUDA OFF)
if(NOT SIESTA_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)  # Hopper (the H200): its own instructions, not PTX compiled at start-up
    endif()
    enable_language(CUDA)
    set(CUDAToolkit_ROOT /usr/local/cuda)
    find_package(CUDAToolkit REQUIRED)
    set(SIESTA_HAVE_CUDA ON)
  elseif(SIESTA_CUDA STREQUAL "ON")
    message(FATAL_ERROR "siesta: SIESTA_CUDA=ON but no CUDA compiler (nvcc) was found; "
                        "install the CUDA Toolkit at /usr/local/cuda or set SIESTA_CUDA=OFF")
  else()
    message(STATUS "siesta: no nvcc found; building without the CUDA backend")
  endif()
endif()

# ---- Server -----------------------------------------------------------------------------------
set(SIESTA_HAVE_SERVER_DEPS OFF)
find_path(SIESTA_HTTPLIB_INCLUDE_DIR httplib.h)
find_library(SIESTA_HTTPLIB_LIBRARY cpp-httplib)
if(SIESTA_HTTPLIB_INCLUDE_DIR)
  add_library(siesta_httplib INTERFACE)
  target_include_directories(siesta_httplib SYSTEM INTERFACE ${SIESTA_HTTPLIB_INCLUDE_DIR})
  if(SIESTA_HTTPLIB_LIBRARY)
    # Debian builds cpp-httplib as a library with OpenSSL, zlib and brotli switched on; the
    # header must see the same switches the library was built with.
    target_link_libraries(siesta_httplib INTERFACE ${SIESTA_HTTPLIB_LIBRARY} OpenSSL::SSL Threads::Threads)
    target_compile_definitions(siesta_httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT
                               CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_BROTLI_SUPPORT)
  else()
    target_link_libraries(siesta_httplib INTERFACE Threads::Threads)  # header-only copy
  endif()
  set(SIESTA_HAVE_SERVER_DEPS ON)
else()
  siesta_missing("cpp-httplib" "libcpp-httplib-dev" "siesta-server and the e2e tests")
endif()

# ---- Tests and benchmarks ---------------------------------------------------------------------
set(SIESTA_HAVE_GTEST OFF)
set(SIESTA_HAVE_RAPIDCHECK OFF)
set(SIESTA_HAVE_BENCHMARK OFF)
if(SIESTA_BUILD_TESTS)
  find_package(GTest QUIET)
  if(GTest_FOUND)
    set(SIESTA_HAVE_GTEST ON)
    include(GoogleTest)
  else()
    siesta_missing("GoogleTest/GoogleMock" "libgtest-dev libgmock-dev" "the test suite")
  endif()
  find_package(rapidcheck QUIET)
  if(rapidcheck_FOUND)
    set(SIESTA_HAVE_RAPIDCHECK ON)
  else()
    siesta_missing("RapidCheck" "librapidcheck-dev" "the property tests")
  endif()
endif()
if(SIESTA_BUILD_BENCH)
  find_package(benchmark QUIET)
  if(benchmark_FOUND)
    set(SIESTA_HAVE_BENCHMARK ON)
  else()
    siesta_missing("Google Benchmark" "libbenchmark-dev" "the benchmarks")
  endif()
endif()
