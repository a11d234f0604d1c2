// Climbs out of the include directories with a relative path: compile_error.
#include "../../../../../../../../etc/hostname"
__global__ void k(int* out) { *out = 1; }
