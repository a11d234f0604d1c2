# Compile sandbox: process supervision, frame pipes, isolation, the compile pool (linked into
# crucible::sandbox) and the crucible-compile-worker executable (NVRTC only, never the driver).
target_sources(crucible_sandbox PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/process.cpp
  ${CMAKE_CURRENT_LIST_DIR}/frame_pipe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/isolation.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compile_job.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compile_log.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compile_cache.cpp
  ${CMAKE_CURRENT_LIST_DIR}/compile_pool.cpp)
target_link_libraries(crucible_sandbox PUBLIC Threads::Threads PRIVATE PkgConfig::SECCOMP)

# The pool's defaults: target architecture and the CUDA/CCCL header folders found at configure
# time (the cccl/ subfolder is added at run time when it exists).
string(REPLACE ";" "\\;" _crucible_cuda_include_dirs "${CUDAToolkit_INCLUDE_DIRS}")
set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/compile_pool.cpp APPEND PROPERTY COMPILE_DEFINITIONS
  CRUCIBLE_DEFAULT_ARCH="${CRUCIBLE_DEFAULT_ARCH}"
  CRUCIBLE_CUDA_INCLUDE_DIRS="${_crucible_cuda_include_dirs}")

add_executable(crucible-compile-worker ${CMAKE_CURRENT_LIST_DIR}/compile_worker_main.cpp)
target_link_libraries(crucible-compile-worker PRIVATE crucible::sandbox CUDA::nvrtc
                      PkgConfig::SECCOMP)
crucible_warnings(crucible-compile-worker)
