// Template bomb: Bomb<40, 1> needs 2^40 distinct instantiations. compile_error at the deadline
// or the memory cap; the worker is killed and replaced.
template <int N, unsigned long long K>
struct Bomb {
  static constexpr unsigned long long value = Bomb<N - 1, 2 * K>::value + Bomb<N - 1, 2 * K + 1>::value;
};
template <unsigned long long K>
struct Bomb<0, K> {
  static constexpr unsigned long long value = K;
};
__global__ void k(unsigned long long* out) { *out = Bomb<40, 1>::value; }
