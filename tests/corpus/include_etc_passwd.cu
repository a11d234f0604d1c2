// Reads a host file through the preprocessor: compile_error, and no line of it in the log.
#include "/etc/passwd"
__global__ void k(int* out) { *out = 1; }
