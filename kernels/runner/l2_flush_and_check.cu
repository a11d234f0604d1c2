// The GPU runner's own kernels: the L2 flush sweep and the device-side output check.
extern "C" __global__ void crucible_l2_sweep(const uint4* data, unsigned long long count,
                                             unsigned int salt, unsigned int* sink) {
  unsigned int acc = 0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    const uint4 v = data[i];
    acc ^= v.x + v.y + v.z + v.w;
  }
  if (acc == salt) sink[threadIdx.x & 1023] = acc;
}

__device__ float crucible_bits_to_float(unsigned int bits) { return __uint_as_float(bits); }

// Exact decoders, as core/numeric.hpp's. kind: 0 bf16, 1 f16, 2 f32, 3 f64, 4 fp8 e4m3,
// 5 fp8 e5m2.
__device__ double crucible_float_at(const unsigned char* p, unsigned long long i, int kind) {
  switch (kind) {
    case 0: return crucible_bits_to_float(((unsigned int)((const unsigned short*)p)[i]) << 16);
    case 1: {
      const unsigned int bits = ((const unsigned short*)p)[i];
      const unsigned int sign = (bits & 0x8000u) << 16, e = (bits >> 10) & 0x1Fu, m = bits & 0x3FFu;
      if (e == 0x1F) return crucible_bits_to_float(sign | 0x7F800000u | (m << 13));
      if (e == 0) { const double v = (double)m * 0x1p-24; return sign ? -v : v; }
      return crucible_bits_to_float(sign | ((e + 112u) << 23) | (m << 13));
    }
    case 2: return ((const float*)p)[i];
    case 3: return ((const double*)p)[i];
    case 4: {
      const unsigned int bits = p[i];
      const unsigned int sign = (bits & 0x80u) << 24, e = (bits >> 3) & 0xFu, m = bits & 0x7u;
      if (e == 0xF && m == 0x7) return crucible_bits_to_float(sign | 0x7FF00000u);
      if (e == 0) { const double v = (double)m * 0x1p-9; return sign ? -v : v; }
      return crucible_bits_to_float(sign | ((e + 120u) << 23) | (m << 20));
    }
    default: {
      const unsigned int bits = p[i];
      const unsigned int sign = (bits & 0x80u) << 24, e = (bits >> 2) & 0x1Fu, m = bits & 0x3u;
      if (e == 0x1F) return crucible_bits_to_float(sign | 0x7F800000u | (m << 21));
      if (e == 0) { const double v = (double)m * 0x1p-16; return sign ? -v : v; }
      return crucible_bits_to_float(sign | ((e + 112u) << 23) | (m << 21));
    }
  }
}

// kind: 6 i8, 7 u8 and bool, 8 i16, 9 i32, 10 i64.
__device__ long long crucible_int_at(const unsigned char* p, unsigned long long i, int kind) {
  switch (kind) {
    case 6: return ((const signed char*)p)[i];
    case 7: return p[i];
    case 8: return ((const short*)p)[i];
    case 9: return ((const int*)p)[i];
    default: return ((const long long*)p)[i];
  }
}

// result[0] += elements that fail; result[1] / result[2] set when any candidate / reference
// element is non-zero (NaN counts as non-zero, as on the host). `poison`: the integer poison
// value (an integer element left holding it fails unless the reference holds it too; float
// poisons are NaNs and fail as such).
extern "C" __global__ void crucible_check(const unsigned char* got, const unsigned char* want,
                                          unsigned long long count, int kind, double atol,
                                          double rtol, long long poison,
                                          unsigned long long* result) {
  unsigned long long failures = 0;
  bool got_nonzero = false, want_nonzero = false;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    if (kind <= 5) {
      const double g = crucible_float_at(got, i, kind), w = crucible_float_at(want, i, kind);
      got_nonzero |= !(g == 0.0);
      want_nonzero |= !(w == 0.0);
      bool ok;
      if (isnan(w)) ok = false;
      else if (isfinite(g) && isfinite(w)) ok = fabs(g - w) <= atol + rtol * fabs(w);
      else ok = g == w;
      failures += ok ? 0 : 1;
    } else {
      const long long g = crucible_int_at(got, i, kind), w = crucible_int_at(want, i, kind);
      got_nonzero |= g != 0;
      want_nonzero |= w != 0;
      if (g != w) {
        // The exact distance, rounded once to double (at least 1), as on the host.
        const unsigned long long distance =
            g > w ? (unsigned long long)g - (unsigned long long)w
                  : (unsigned long long)w - (unsigned long long)g;
        const double error = (double)distance;
        failures += g != poison && error <= atol + rtol * fabs((double)w) ? 0 : 1;
      }
    }
  }
  if (failures != 0) atomicAdd(&result[0], failures);
  if (got_nonzero) atomicOr(&result[1], 1ull);
  if (want_nonzero) atomicOr(&result[2], 1ull);
}
