// Loading the CUDA driver for the GPU kernel tests.
#include "tests/kernels/gpu_driver.hpp"

#include <cstdio>
#include <cstdlib>

namespace crucible::kernels_test {

const Driver& driver() {
  static const Driver loaded = [] {
    Driver d;
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    const auto skip = [](const char* why) {
      std::fprintf(stderr, "\n*** test_kernels_gpu SKIPPED: %s ***\n\n", why);
      std::fflush(stderr);
      std::_Exit(77);
    };
    if (library == nullptr) skip("libcuda.so.1 not found (no NVIDIA driver)");
    Driver::load(library, d.init, "cuInit");
    Driver::load(library, d.device_count, "cuDeviceGetCount");
    Driver::load(library, d.device_get, "cuDeviceGet");
    Driver::load(library, d.retain, "cuDevicePrimaryCtxRetain");
    Driver::load(library, d.set_current, "cuCtxSetCurrent");
    Driver::load(library, d.module_load, "cuModuleLoadData");
    Driver::load(library, d.get_function, "cuModuleGetFunction");
    Driver::load(library, d.alloc, "cuMemAlloc_v2");
    Driver::load(library, d.free, "cuMemFree_v2");
    Driver::load(library, d.to_device, "cuMemcpyHtoD_v2");
    Driver::load(library, d.to_host, "cuMemcpyDtoH_v2");
    Driver::load(library, d.memset, "cuMemsetD8_v2");
    Driver::load(library, d.launch, "cuLaunchKernel");
    Driver::load(library, d.synchronize, "cuCtxSynchronize");
    Driver::load(library, d.event_create, "cuEventCreate");
    Driver::load(library, d.event_record, "cuEventRecord");
    Driver::load(library, d.event_elapsed, "cuEventElapsedTime_v2");
    Driver::load(library, d.module_unload, "cuModuleUnload");
    Driver::load(library, d.param_info, "cuFuncGetParamInfo");
    Driver::load(library, d.set_attribute, "cuFuncSetAttribute");
    Driver::load(library, d.launch_ex, "cuLaunchKernelEx");
    Driver::load(library, d.get_limit, "cuCtxGetLimit");
    Driver::load(library, d.encode_tiled, "cuTensorMapEncodeTiled");
    int count = 0;
    if (d.init == nullptr || d.init(0) != CUDA_SUCCESS) skip("cuInit failed (no usable GPU)");
    if (d.device_count(&count) != CUDA_SUCCESS || count == 0) skip("no CUDA device");
    CUdevice device = 0;
    CUcontext context = nullptr;
    if (d.device_get(&device, 0) != CUDA_SUCCESS || d.retain(&context, device) != CUDA_SUCCESS ||
        d.set_current(context) != CUDA_SUCCESS) {
      skip("cannot create a context on device 0");
    }
    return d;
  }();
  return loaded;
}

}  // namespace crucible::kernels_test
