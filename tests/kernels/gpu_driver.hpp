// The CUDA driver for the GPU kernel tests, loaded at run time (dlopen), so the test binary also
// starts where there is no driver; there it reports itself skipped (exit 77), never passed.
#pragma once

#include <cuda.h>
#include <dlfcn.h>
#include <doctest/doctest.h>

namespace crucible::kernels_test {

// The driver entry points the tests use, resolved from libcuda.so.1.
struct Driver {
  decltype(&cuInit) init = nullptr;
  decltype(&cuDeviceGetCount) device_count = nullptr;
  decltype(&cuDeviceGet) device_get = nullptr;
  decltype(&cuDevicePrimaryCtxRetain) retain = nullptr;
  decltype(&cuCtxSetCurrent) set_current = nullptr;
  decltype(&cuModuleLoadData) module_load = nullptr;
  decltype(&cuModuleGetFunction) get_function = nullptr;
  decltype(&cuMemAlloc_v2) alloc = nullptr;
  decltype(&cuMemFree_v2) free = nullptr;
  decltype(&cuMemcpyHtoD_v2) to_device = nullptr;
  decltype(&cuMemcpyDtoH_v2) to_host = nullptr;
  decltype(&cuMemsetD8_v2) memset = nullptr;
  decltype(&cuLaunchKernel) launch = nullptr;
  decltype(&cuCtxSynchronize) synchronize = nullptr;
  decltype(&cuEventCreate) event_create = nullptr;
  decltype(&cuEventRecord) event_record = nullptr;
  decltype(&cuEventElapsedTime_v2) event_elapsed = nullptr;
  decltype(&cuModuleUnload) module_unload = nullptr;
  decltype(&cuFuncGetParamInfo) param_info = nullptr;
  decltype(&cuFuncSetAttribute) set_attribute = nullptr;
  decltype(&cuLaunchKernelEx) launch_ex = nullptr;
  decltype(&cuCtxGetLimit) get_limit = nullptr;
  decltype(&cuTensorMapEncodeTiled) encode_tiled = nullptr;

  template <class F>
  static void load(void* library, F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(library, name));
  }
};

// The driver with a current context on device 0, or exit(77) when there is none.
const Driver& driver();

}  // namespace crucible::kernels_test

#define CU_REQUIRE(call) REQUIRE_MESSAGE((call) == CUDA_SUCCESS, #call)
