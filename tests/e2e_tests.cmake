# siesta-server e2e lifecycle tests (filled by the e2e work)
if(NOT TARGET siesta_server_lib)
  return()
endif()
