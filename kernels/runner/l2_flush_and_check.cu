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

// The largest of `value` over the warp's lanes (non-negative doubles as their bits: for them the
// integer order is the numeric order), raised into *target by lane 0.
__device__ void crucible_warp_max(unsigned long long value, unsigned long long* target) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const unsigned long long other = __shfl_down_sync(0xFFFFFFFFu, value, offset);
    value = other > value ? other : value;
  }
  if ((threadIdx.x & 31) == 0 && value != 0) atomicMax(target, value);
}

// Raises the running error maxima by one pair's error (relative where the reference is non-zero).
__device__ void crucible_raise_errors(double error, double magnitude, double* max_abs,
                                      double* max_rel) {
  *max_abs = error > *max_abs ? error : *max_abs;
  if (magnitude != 0.0) {
    const double relative = error / magnitude;
    *max_rel = relative > *max_rel ? relative : *max_rel;
  }
}

// result[0] += elements that fail; result[1] / result[2] set when any candidate / reference
// element is non-zero (NaN counts as non-zero, as on the host); result[3] / result[4] raised to
// the largest absolute / relative error (double bits) over the pairs the host's maxima range over
// (floats: both finite, relative where the reference is non-zero; integers: pairs that differ),
// computed with the host's operations, so equal to its max_abs_error / max_rel_error bit for bit.
// `poison`: the integer poison value (an integer element left holding it fails unless the
// reference holds it too; float poisons are NaNs and fail as such). blockDim.x is a multiple of
// 32.
extern "C" __global__ void crucible_check(const unsigned char* got, const unsigned char* want,
                                          unsigned long long count, int kind, double atol,
                                          double rtol, long long poison,
                                          unsigned long long* result) {
  unsigned long long failures = 0;
  bool got_nonzero = false, want_nonzero = false;
  double max_abs = 0.0, max_rel = 0.0;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < count;
       i += (unsigned long long)gridDim.x * blockDim.x) {
    if (kind <= 5) {
      const double g = crucible_float_at(got, i, kind), w = crucible_float_at(want, i, kind);
      got_nonzero |= !(g == 0.0);
      want_nonzero |= !(w == 0.0);
      bool ok;
      if (isnan(w)) {
        ok = false;
      } else if (isfinite(g) && isfinite(w)) {
        const double error = fabs(g - w), magnitude = fabs(w);
        crucible_raise_errors(error, magnitude, &max_abs, &max_rel);
        ok = error <= atol + rtol * magnitude;
      } else {
        ok = g == w;
      }
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
        const double magnitude = fabs((double)w);
        const bool unwritten = g == poison;
        if (!unwritten) crucible_raise_errors(error, magnitude, &max_abs, &max_rel);
        failures += !unwritten && error <= atol + rtol * magnitude ? 0 : 1;
      }
    }
  }
  if (failures != 0) atomicAdd(&result[0], failures);
  if (got_nonzero) atomicOr(&result[1], 1ull);
  if (want_nonzero) atomicOr(&result[2], 1ull);
  crucible_warp_max((unsigned long long)__double_as_longlong(max_abs), &result[3]);
  crucible_warp_max((unsigned long long)__double_as_longlong(max_rel), &result[4]);
}

// XORs `bytes` bytes at `data` with a keystream of `key` (splitmix64 of key and the 8-byte word
// index; byte j of a word from bits 8j..8j+7). Applied twice with one key it restores the data:
// the reference's answer stays on the device scrambled while candidate code runs.
extern "C" __global__ void crucible_scramble(unsigned char* data, unsigned long long bytes,
                                             unsigned long long key) {
  const unsigned long long words = (bytes + 7) / 8;
  for (unsigned long long w = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; w < words;
       w += (unsigned long long)gridDim.x * blockDim.x) {
    unsigned long long z = key + (w + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const unsigned long long first = w * 8;
    const unsigned long long last = first + 8 < bytes ? first + 8 : bytes;
    for (unsigned long long b = first; b < last; ++b) {
      data[b] ^= (unsigned char)(z >> (8 * (b - first)));
    }
  }
}
