# The GPU runner executable and its server-side job format. Only the executable links the CUDA
# driver and CUPTI, so the server and CI never need libcuda.so.1 to load.
target_sources(crucible_sandbox PRIVATE ${CMAKE_CURRENT_LIST_DIR}/runner_job.cpp
                                        ${CMAKE_CURRENT_LIST_DIR}/runner_pool.cpp
                                        ${CMAKE_CURRENT_LIST_DIR}/plan_context.cpp)

add_executable(crucible-gpu-runner
  ${CMAKE_CURRENT_LIST_DIR}/runner/main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/cuda_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/job.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/kernel_timer.cpp)
target_link_libraries(crucible-gpu-runner PRIVATE crucible::sandbox crucible::tasks
                                                  CUDA::cuda_driver CUDA::cupti ${CMAKE_DL_LIBS})
crucible_warnings(crucible-gpu-runner)
