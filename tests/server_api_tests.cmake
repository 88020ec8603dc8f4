# siesta-server OpenAI API units (filled by the API work)
if(NOT TARGET siesta_server_lib)
  return()
endif()
