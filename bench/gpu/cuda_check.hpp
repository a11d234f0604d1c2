// CHECK(call): the bench drivers' check of a CUDA runtime call; on an error, its text and the
// line go to stderr and the program exits with status 2.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                           \
  do {                                                                                     \
    const cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                                \
      std::fprintf(stderr, "CUDA error %s at line %d\n", cudaGetErrorString(e), __LINE__); \
      std::exit(2);                                                                        \
    }                                                                                      \
  } while (0)
