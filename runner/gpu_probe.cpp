// Driver probe through dlopen, so the server binary loads on machines without a GPU.
#include "runner/gpu_probe.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <charconv>
#include <set>

namespace crucible::runner {
namespace {
// The few driver entry points the probe needs, declared by hand: CUresult is an int enum and
// CUdevice an int in every CUDA version.
using CuInit = int (*)(unsigned int);
using CuDeviceGetCount = int (*)(int*);
using CuDeviceGet = int (*)(int*, int);
using CuDeviceGetName = int (*)(char*, int, int);
using CuDeviceGetAttribute = int (*)(int*, int, int);
constexpr int kAttrComputeMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrComputeMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR

template <class Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(dlsym(library, name));
}
}  // namespace

core::Value GpuProbe::to_value() const {
  core::Value list = core::Value::array();
  for (const auto& gpu : gpus) {
    list.push_back(core::Value{{"index", gpu.index},
                               {"name", gpu.name},
                               {"compute_capability", std::to_string(gpu.compute_major) + "." +
                                                          std::to_string(gpu.compute_minor)}});
  }
  return list;
}

namespace {
std::string gpus_that_exist(const GpuProbe& probe) {
  if (probe.gpus.empty()) {
    return probe.reason.empty() ? "this server has no GPU" : probe.reason;
  }
  std::string names;
  for (const auto& gpu : probe.gpus) {
    names += (names.empty() ? "" : ", ") + std::to_string(gpu.index);
    if (!gpu.name.empty()) names += " (" + gpu.name + ")";
  }
  return "the GPUs here are " + names;
}
}  // namespace

core::Result<GpuProbe> select_gpus(const GpuProbe& probe, std::string_view list) {
  const auto refuse = [&](const std::string& why) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "\"" + std::string(list) + "\": " + why + "; " + gpus_that_exist(probe)};
  };
  GpuProbe selected;
  std::set<int> seen;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = std::min(list.find(',', start), list.size());
    std::string_view entry = list.substr(start, comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    int ordinal = -1;
    const auto parsed = std::from_chars(entry.data(), entry.data() + entry.size(), ordinal);
    if (entry.empty() || parsed.ec != std::errc() || parsed.ptr != entry.data() + entry.size() ||
        ordinal < 0) {
      return refuse("expected a comma list of CUDA ordinals such as 0,2, found \"" +
                    std::string(entry) + "\"");
    }
    if (!seen.insert(ordinal).second) {
      return refuse("GPU " + std::to_string(ordinal) + " is named twice");
    }
    const GpuInfo* found = nullptr;
    for (const auto& gpu : probe.gpus) {
      if (gpu.index == ordinal) found = &gpu;
    }
    if (found == nullptr) return refuse("there is no GPU " + std::to_string(ordinal));
    selected.gpus.push_back(*found);
    if (comma == list.size()) break;
    start = comma + 1;
  }
  return selected;
}

GpuProbe probe_gpus() {
  GpuProbe probe;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    probe.reason = std::string("no CUDA driver on this server (") +
                   (why != nullptr ? why : "libcuda.so.1 not found") + ")";
    return probe;
  }
  const auto cu_init = symbol<CuInit>(library, "cuInit");
  const auto cu_count = symbol<CuDeviceGetCount>(library, "cuDeviceGetCount");
  const auto cu_get = symbol<CuDeviceGet>(library, "cuDeviceGet");
  const auto cu_name = symbol<CuDeviceGetName>(library, "cuDeviceGetName");
  const auto cu_attr = symbol<CuDeviceGetAttribute>(library, "cuDeviceGetAttribute");
  if (!cu_init || !cu_count || !cu_get || !cu_name || !cu_attr) {
    probe.reason = "the CUDA driver lacks an expected entry point";
    return probe;
  }
  if (const int rc = cu_init(0); rc != 0) {
    probe.reason =
        "no CUDA device on this server (cuInit failed with error " + std::to_string(rc) + ")";
    return probe;
  }
  int count = 0;
  if (cu_count(&count) != 0 || count == 0) {
    probe.reason = "no CUDA device on this server";
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    int device = 0;
    if (cu_get(&device, i) != 0) continue;
    GpuInfo info;
    info.index = i;
    char name[256] = {};
    if (cu_name(name, sizeof name, device) == 0) info.name = name;
    cu_attr(&info.compute_major, kAttrComputeMajor, device);
    cu_attr(&info.compute_minor, kAttrComputeMinor, device);
    probe.gpus.push_back(std::move(info));
  }
  if (probe.gpus.empty()) probe.reason = "no CUDA device could be opened";
  // The library stays loaded: unloading a driver is never worth the risk.
  return probe;
}

}  // namespace crucible::runner
