// What preparing one timed call costs the GPU, piece by piece (run on the GPU machine): drawing
// an input of N values on the device (randn with the host's bits, the timed calls' fast randn,
// uniform), copying it, and the L2 sweep. Each piece runs `reps` times between two CUDA events;
// prints one JSON object with the mean microseconds per piece (and writes it, with the date and
// the command, to --json FILE).
//
//   crucible-bench-call-prep [--elements 33554432] [--reps 20] [--json FILE]
#include <cstdio>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "runner/child/cuda_check.hpp"
#include "runner/child/device.hpp"
#include "runner/child/device_values.hpp"

using namespace crucible;
using namespace crucible::runner::child;

int main(int argc, char** argv) {
  std::uint64_t elements = std::uint64_t{1} << 25;  // 64 MiB of bf16: a large case's input
  int reps = 20;
  std::string json_path, command = argv[0];
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    if (i + 1 >= argc || (arg != "--elements" && arg != "--reps" && arg != "--json")) {
      std::fprintf(stderr, "usage: %s [--elements N] [--reps R] [--json FILE]\n", argv[0]);
      return 2;
    }
    command += " " + arg + " " + argv[i + 1];
    if (arg == "--elements") {
      elements = std::stoull(argv[i + 1]);
    } else if (arg == "--reps") {
      reps = std::stoi(argv[i + 1]);
    } else {
      json_path = argv[i + 1];
    }
  }
  try {
    Device device;
    device.open(0);
    DeviceBuffer a(elements * 2, false), b(elements * 2, false);
    tasks::GeneratorSpec randn;
    randn.kind = tasks::GeneratorKind::kRandn;
    randn.std = 1.0;
    tasks::GeneratorSpec uniform;
    uniform.kind = tasks::GeneratorKind::kUniform;
    uniform.lo = -1.0;
    uniform.hi = 1.0;
    CUevent start = nullptr, stop = nullptr;
    check(cuEventCreate(&start, CU_EVENT_DEFAULT), "event");
    check(cuEventCreate(&stop, CU_EVENT_DEFAULT), "event");
    auto time_us = [&](auto&& piece) {
      piece(0);  // warm-up
      check(cuEventRecord(start, device.stream), "record");
      for (int r = 1; r <= reps; ++r) piece(r);
      check(cuEventRecord(stop, device.stream), "record");
      check(cuEventSynchronize(stop), "sync");
      float ms = 0;
      check(cuEventElapsedTime(&ms, start, stop), "elapsed");
      return 1000.0 * ms / reps;
    };
    const double randn_host = time_us([&](int r) {
      generate_on_device(device, randn, core::DType::kBF16, 7 + r, 0, elements, a.data(),
                         Draw::kAsHost);
    });
    const double randn_fast = time_us([&](int r) {
      generate_on_device(device, randn, core::DType::kBF16, 7 + r, 0, elements, a.data(),
                         Draw::kFast);
    });
    const double uniform_host = time_us([&](int r) {
      generate_on_device(device, uniform, core::DType::kBF16, 7 + r, 0, elements, a.data());
    });
    const double copy = time_us([&](int) {
      check(cuMemcpyDtoDAsync(b.data(), a.data(), elements * 2, device.stream), "copy");
    });
    const double sweep = time_us([&](int r) { device.flush_l2(static_cast<std::uint32_t>(r)); });
    char figures[512];
    std::snprintf(figures, sizeof figures,
                  "\"gpu\": \"%s\", \"elements\": %llu, \"dtype\": \"bf16\", \"reps\": %d, "
                  "\"us_per_call\": {\"randn_as_host\": %.1f, \"randn_fast\": %.1f, "
                  "\"uniform_as_host\": %.1f, \"copy\": %.1f, \"l2_sweep\": %.1f}, "
                  "\"l2_scratch_bytes\": %zu",
                  device.name.c_str(), static_cast<unsigned long long>(elements), reps, randn_host,
                  randn_fast, uniform_host, copy, sweep, device.l2_scratch.bytes());
    std::printf("{%s}\n", figures);
    if (!json_path.empty()) {
      char date[32];
      const std::time_t now = std::time(nullptr);
      std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
      std::ofstream out(json_path);
      out << "{\"benchmark\": \"timed-call preparation\", \"date\": \"" << date
          << "\", \"command\": \"" << command << "\", " << figures << "}\n";
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
        return 2;
      }
    }
  } catch (const CudaFailure& failure) {
    std::fprintf(stderr, "%s\n", failure.what());
    return 1;
  }
  return 0;
}
