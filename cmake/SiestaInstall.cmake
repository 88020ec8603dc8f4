# `cmake --install`: the library an engine adopts (docs/EMBEDDING.md). The core layers (base,
# memory, snapshot, offload), the simulator and the CUDA VMM backends, their public headers under
# include/siesta/ (the layers' own paths: include/siesta/core/offload/offloader.h, ...; internal/
# stays out), a CMake package (find_package(siesta CONFIG): siesta::offload, siesta::sim,
# siesta::cuda_vmm, ...; versioned, 0.x minors are not compatible with each other) and a
# pkg-config file. The engine, the server, the runtime and the test tools are not part of it.
include(CMakePackageConfigHelpers)

set(_siesta_library_targets siesta_options siesta_base siesta_memory siesta_snapshot
    siesta_offload siesta_compute siesta_backend_sim)
set_target_properties(siesta_options PROPERTIES EXPORT_NAME options)
set_target_properties(siesta_base PROPERTIES EXPORT_NAME base)
set_target_properties(siesta_memory PROPERTIES EXPORT_NAME memory)
set_target_properties(siesta_snapshot PROPERTIES EXPORT_NAME snapshot)
set_target_properties(siesta_offload PROPERTIES EXPORT_NAME offload)
set_target_properties(siesta_compute PROPERTIES EXPORT_NAME compute)
set_target_properties(siesta_backend_sim PROPERTIES EXPORT_NAME sim)
if(SIESTA_HAVE_CUDA)
  list(APPEND _siesta_library_targets siesta_backend_cuda)
  set_target_properties(siesta_backend_cuda PROPERTIES EXPORT_NAME cuda_vmm)
endif()

install(TARGETS ${_siesta_library_targets} EXPORT siestaTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})

# The public headers: every header of the core layers but their internal/ ones, and the two
# backends' (what they include is all in core: tests/install checks each compiles alone).
install(DIRECTORY core/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/siesta/core
        FILES_MATCHING PATTERN "*.h" PATTERN "internal" EXCLUDE)
install(FILES backends/sim/sim_backend.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/siesta/backends/sim)
if(SIESTA_HAVE_CUDA)
  install(FILES backends/cuda_vmm/cuda_vmm_backend.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/siesta/backends/cuda_vmm)
endif()

set(_siesta_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/siesta)
install(EXPORT siestaTargets NAMESPACE siesta:: DESTINATION ${_siesta_cmake_dir})
configure_package_config_file(cmake/siestaConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/siestaConfig.cmake INSTALL_DESTINATION ${_siesta_cmake_dir})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/siestaConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/siestaConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/siestaConfigVersion.cmake
        DESTINATION ${_siesta_cmake_dir})

# pkg-config: `pkg-config --cflags --libs siesta` gives the core layers and the simulator. Its
# prefix is found from the file's own place, so an install moved or made with --prefix works.
file(RELATIVE_PATH _siesta_pc_to_prefix "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" _siesta_pc_to_prefix "${_siesta_pc_to_prefix}")
configure_file(cmake/siesta.pc.in ${CMAKE_CURRENT_BINARY_DIR}/siesta.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/siesta.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
