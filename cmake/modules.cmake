# The module table of DESIGN.md §1, held by the build: each module's targets see, on their
# include path, only the folders the module may use. Includes stay rooted at the repository
# ("core/result.hpp"), so an include in the wrong direction fails to compile. A module's root is
# a folder of symbolic links in the build tree; scripts/check-layering holds the same table
# (read from this file) against the code, sub-folders included.
set(CRUCIBLE_SEES_core core)
set(CRUCIBLE_SEES_tasks core tasks)
set(CRUCIBLE_SEES_judge core tasks judge)
set(CRUCIBLE_SEES_kernels core kernels)
set(CRUCIBLE_SEES_action core tasks action)
set(CRUCIBLE_SEES_sandbox core sandbox)
set(CRUCIBLE_SEES_runner core tasks judge kernels action sandbox runner model)
set(CRUCIBLE_SEES_rewards core rewards)
set(CRUCIBLE_SEES_env core tasks judge kernels action sandbox runner rewards env model)
set(CRUCIBLE_SEES_cli core tasks judge kernels action sandbox runner rewards env clients model)
set(CRUCIBLE_SEES_clients core clients)
set(CRUCIBLE_SEES_model core tasks model)

# crucible_module(<target> <module>): <target> belongs to <module> and sees what it may use.
function(crucible_module target module)
  if(NOT DEFINED CRUCIBLE_SEES_${module})
    message(FATAL_ERROR "crucible_module: no module '${module}' in cmake/modules.cmake")
  endif()
  set(root ${PROJECT_BINARY_DIR}/include-roots/${module})
  foreach(folder IN LISTS CRUCIBLE_SEES_${module})
    if(NOT IS_SYMLINK ${root}/${folder})
      file(MAKE_DIRECTORY ${root})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
    endif()
  endforeach()
  target_include_directories(${target} PRIVATE ${root})
endfunction()

# Tests, benchmarks and fuzzers look at every module from outside: the whole repository.
function(crucible_sees_everything target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
endfunction()
