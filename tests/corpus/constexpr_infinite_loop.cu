// A constant expression that never terminates: compile_error (the front end's constexpr step
// limit, or the deadline).
__host__ __device__ constexpr int spin() {
  int i = 0;
  while (true) ++i;
  return i;
}
__global__ void k(int* out) {
  constexpr int value = spin();
  *out = value;
}
