# Launch plans (directives, structured form, per-case evaluation): a library of their own that
# needs only crucible::core, so the server can validate a plan without the CUDA parts.
add_library(crucible_launch_plan STATIC
  ${CMAKE_CURRENT_SOURCE_DIR}/launch_plan.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/launch_plan_directives.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/launch_plan_structured.cpp)
add_library(crucible::launch_plan ALIAS crucible_launch_plan)
target_include_directories(crucible_launch_plan PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(crucible_launch_plan PUBLIC crucible::core)
crucible_warnings(crucible_launch_plan)
target_link_libraries(crucible_sandbox PUBLIC crucible::launch_plan)
