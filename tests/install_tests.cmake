# The installed library, as an engine outside the tree builds against it (label install):
# scripts/check-install installs this build to a temporary prefix, compiles every installed
# header alone, and builds and runs examples/host_offload with find_package and pkg-config.
# Not in sanitizer or fuzz builds: their libraries need the sanitizer runtimes, which an
# installed package does not pass on.
if(SIESTA_SANITIZE OR SIESTA_FUZZ)
  return()
endif()
add_test(NAME InstallPackage.TheHostExampleBuildsAndRunsFromTheInstalledPackage
         COMMAND ${PROJECT_SOURCE_DIR}/scripts/check-install ${CMAKE_BINARY_DIR})
set_tests_properties(InstallPackage.TheHostExampleBuildsAndRunsFromTheInstalledPackage
                     PROPERTIES LABELS install TIMEOUT 600)
