# Compile sandbox suite (included by tests/sandbox/CMakeLists.txt): process supervision, frame
# pipes, log/resource parsing, and the compile pool driving real crucible-compile-worker
# processes (NVRTC only: runs without a GPU).
crucible_test_suite(test_compile
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_compile_pool.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_compile_log.cpp
          ${CMAKE_CURRENT_LIST_DIR}/test_process.cpp
  LIBS crucible::sandbox)
target_compile_definitions(test_compile PRIVATE
  CRUCIBLE_COMPILE_WORKER="$<TARGET_FILE:crucible-compile-worker>")
add_dependencies(test_compile crucible-compile-worker)
set_tests_properties(test_compile PROPERTIES TIMEOUT 300)
