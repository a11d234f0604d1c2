# Host-side parts of the GPU runner that need no GPU: output comparison and timing statistics.
target_sources(crucible_sandbox PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/compare.cpp
  ${CMAKE_CURRENT_LIST_DIR}/checkers/topk.cpp
  ${CMAKE_CURRENT_LIST_DIR}/timing_stats.cpp
  ${CMAKE_CURRENT_LIST_DIR}/task_checker.cpp)
