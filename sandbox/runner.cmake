# The GPU runner executable and its server-side job format. Only the executable links the CUDA
# driver and CUPTI, so the server and CI never need libcuda.so.1 to load.
target_sources(crucible_sandbox PRIVATE ${CMAKE_CURRENT_LIST_DIR}/runner_job.cpp
                                        ${CMAKE_CURRENT_LIST_DIR}/runner_pool.cpp
                                        ${CMAKE_CURRENT_LIST_DIR}/plan_context.cpp)

# Device-side pieces shared by the runner and the kernel-timing benchmark.
add_library(crucible_runner_device STATIC
  ${CMAKE_CURRENT_LIST_DIR}/runner/cuda_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/device.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/kernel_timer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/library_reference.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/device_values.cpp)
target_include_directories(crucible_runner_device PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(crucible_runner_device PUBLIC crucible::core crucible::sandbox crucible::tasks CUDA::cuda_driver CUDA::cupti CUDA::nvrtc
                                                    ${CMAKE_DL_LIBS})
crucible_warnings(crucible_runner_device)

add_executable(crucible-gpu-runner
  ${CMAKE_CURRENT_LIST_DIR}/runner/main.cpp
  ${CMAKE_CURRENT_LIST_DIR}/runner/job.cpp)
target_link_libraries(crucible-gpu-runner PRIVATE crucible::sandbox crucible::tasks
                                                  crucible_runner_device)
crucible_warnings(crucible-gpu-runner)
