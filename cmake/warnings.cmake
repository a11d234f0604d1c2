# One place for compiler warnings: every crucible target calls crucible_warnings(target).
function(crucible_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
                                           -Wold-style-cast -Wcast-align
                                           -Wimplicit-fallthrough)
  if(CRUCIBLE_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
