// Input values on the GPU, statement for statement the host's (tasks/random.hpp, generators.cpp).
typedef unsigned long long crucible_u64;

__device__ __forceinline__ crucible_u64 crucible_splitmix64(crucible_u64 x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}
__device__ __forceinline__ crucible_u64 crucible_keyed_bits(crucible_u64 key, crucible_u64 k) {
  return crucible_splitmix64(key ^ (k * 0xD1B54A32D192ED03ULL));
}
__device__ __forceinline__ crucible_u64 crucible_stream_bits(crucible_u64 seed, crucible_u64 k) {
  return crucible_keyed_bits(crucible_splitmix64(seed), k);
}
__device__ __forceinline__ double crucible_unit_double(crucible_u64 bits) {
  return (double)(bits >> 11) * 0x1.0p-53;
}

__device__ crucible_u64 crucible_mix_bits(crucible_u64 x, crucible_u64 seed, unsigned bits) {
  const crucible_u64 mask = bits >= 64 ? ~0ULL : (1ULL << bits) - 1;
  const unsigned shift = bits > 1 ? (bits + 1) / 2 : 1;
  for (crucible_u64 round = 0; round < 4; ++round) {
    const crucible_u64 key = crucible_stream_bits(seed, round);
    x = (x + key) & mask;
    x = (x * (key | 1)) & mask;
    x ^= x >> shift;
  }
  return x;
}

__device__ crucible_u64 crucible_permuted_index(crucible_u64 seed, crucible_u64 index,
                                                crucible_u64 max) {
  unsigned bits = 1;
  while (bits < 64 && (1ULL << bits) < max) ++bits;
  crucible_u64 x = crucible_mix_bits(index, seed, bits);
  while (x >= max) x = crucible_mix_bits(x, seed, bits);
  return x;
}

__device__ double crucible_portable_log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -__longlong_as_double(0x7FF0000000000000LL)
                                  : __longlong_as_double(0x7FF8000000000000LL);
  if (isinf(x)) return x;
  int exponent = 0;
  double mantissa = frexp(x, &exponent);
  if (mantissa < 0.70710678118654752440) {
    mantissa *= 2.0;
    --exponent;
  }
  const double s = (mantissa - 1.0) / (mantissa + 1.0);
  const double s2 = s * s;
  double series = 1.0 / 27;
  for (int k = 25; k >= 1; k -= 2) series = 1.0 / k + s2 * series;
  return (double)exponent * 0.6931471805599453094 + 2.0 * s * series;
}

// Element `index` of a randn stream (mean, std): one of the pair (index & ~1, index | 1).
__device__ double crucible_randn(crucible_u64 key, crucible_u64 index, double mean,
                                 double std_dev) {
  const crucible_u64 pair = index >> 1;
  for (crucible_u64 attempt = 0; attempt < 64; ++attempt) {
    const crucible_u64 counter = (pair * 64 + attempt) * 2;
    const double u = 2.0 * crucible_unit_double(crucible_keyed_bits(key, counter)) - 1.0;
    const double v = 2.0 * crucible_unit_double(crucible_keyed_bits(key, counter + 1)) - 1.0;
    const double radius2 = u * u + v * v;
    if (radius2 <= 0.0 || radius2 >= 1.0) continue;
    const double factor = sqrt(-2.0 * crucible_portable_log(radius2) / radius2);
    return (index & 1) == 0 ? mean + std_dev * (u * factor) : mean + std_dev * (v * factor);
  }
  return mean;
}

// A timed call's randn (draw 1): the same normal distribution, not the host's bits. Only the
// device ever reads a timed call's values (a checked call's reference runs on values drawn here
// again; a failing call's inputs are downloaded), so the portable double path above, which
// must match the host's, is not needed there; this fp32 Box-Muller from one 64-bit draw per
// pair costs a fraction of it (bench/call_prep.cpp) and redrawing large in-place inputs every
// call is most of a large case's time outside its kernels.
__device__ double crucible_fast_randn(crucible_u64 key, crucible_u64 index, double mean,
                                      double std_dev) {
  const crucible_u64 bits = crucible_keyed_bits(key ^ 0xFA57D2A3C1B4E5F6ULL, index >> 1);
  const float u1 = (float)((unsigned)(bits >> 40) + 1u) * 0x1p-24f;  // (0, 1]
  const float u2 = (float)(unsigned)(bits & 0xFFFFFFu) * 0x1p-24f;   // [0, 1)
  const float radius = sqrtf(-2.0f * logf(u1));
  float s, c;
  sincospif(2.0f * u2, &s, &c);
  return mean + std_dev * (double)(radius * ((index & 1) == 0 ? c : s));
}

struct crucible_list { double values[64]; };

__device__ unsigned short crucible_bf16(float value) {
  const unsigned int bits = __float_as_uint(value);
  if (isnan(value)) return (unsigned short)((bits >> 16) | 0x0040);
  const unsigned int rounding = 0x7FFF + ((bits >> 16) & 1);
  return (unsigned short)((bits + rounding) >> 16);
}

__device__ unsigned short crucible_f16(float value) {
  const unsigned int bits = __float_as_uint(value);
  const unsigned short sign = (unsigned short)((bits >> 16) & 0x8000);
  const unsigned int magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return (unsigned short)(sign | 0x7E00);
  if (magnitude >= 0x477FF000) return (unsigned short)(sign | 0x7C00);
  if (magnitude < 0x38800000) {
    if (magnitude < 0x33000000) return sign;
    const unsigned int exponent = magnitude >> 23;
    const unsigned int mantissa = (magnitude & 0x7FFFFF) | 0x800000;
    const unsigned int shift = 126 - exponent;
    unsigned int half = mantissa >> shift;
    const unsigned int rest = mantissa & ((1u << shift) - 1);
    const unsigned int halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1) != 0)) ++half;
    return (unsigned short)(sign | half);
  }
  unsigned int rebased = magnitude - (112u << 23);
  rebased += 0x0FFF + ((rebased >> 13) & 1);
  return (unsigned short)(sign | (rebased >> 13));
}

// round_magnitude<exponent_bits, mantissa_bits> of core/numeric.cpp.
__device__ unsigned int crucible_round_magnitude(unsigned int abs_bits, int exponent_bits,
                                                 int mantissa_bits) {
  const int bias = (1 << (exponent_bits - 1)) - 1;
  const int min_normal_exponent = 1 - bias;
  const int field = (int)(abs_bits >> 23);
  const crucible_u64 fraction = abs_bits & 0x7FFFFFu;
  const crucible_u64 significand = field == 0 ? fraction : (fraction | 0x800000u);
  const int exponent = field == 0 ? -126 : field - 127;
  const int target_exponent = exponent > min_normal_exponent ? exponent : min_normal_exponent;
  const int shift = (23 - mantissa_bits) + (target_exponent - exponent);
  if (shift > 25) return 0;
  const crucible_u64 kept = significand >> shift;
  const crucible_u64 rest = significand & ((1ULL << shift) - 1);
  const crucible_u64 half = 1ULL << (shift - 1);
  unsigned int result =
      ((unsigned int)(target_exponent + bias - 1) << mantissa_bits) + (unsigned int)kept;
  if (rest > half || (rest == half && (result & 1u) != 0)) ++result;
  return result;
}

// core::float_to_fp8_e4m3 (e4m3 != 0) and core::float_to_fp8_e5m2: saturating, NaN kept.
__device__ unsigned char crucible_fp8(float value, int e4m3) {
  const unsigned int bits = __float_as_uint(value);
  const unsigned int sign = (bits >> 24) & 0x80u;
  const unsigned int magnitude = bits & 0x7FFFFFFFu;
  const unsigned int max_finite = e4m3 ? 0x7Eu : 0x7Bu;
  if (magnitude > 0x7F800000u) {
    return (unsigned char)(e4m3 ? (sign | 0x7Fu) : (sign | 0x7Eu | ((bits >> 21) & 1u)));
  }
  const unsigned int rounded =
      magnitude == 0x7F800000u
          ? max_finite
          : (e4m3 ? crucible_round_magnitude(magnitude, 4, 3)
                  : crucible_round_magnitude(magnitude, 5, 2));
  return (unsigned char)(sign | (rounded < max_finite ? rounded : max_finite));
}

// clamp_to<T>(value) for a T spanning [lo, hi].
__device__ __forceinline__ double crucible_clamped(double value, double lo, double hi) {
  if (isnan(value)) return 0.0;
  if (value <= lo) return lo;
  if (value >= hi) return hi;
  return value;
}

extern "C" __global__ void crucible_generate(unsigned char* out, crucible_u64 first,
                                             crucible_u64 count, int kind, int type,
                                             crucible_u64 seed, double a, double b,
                                             long long max, crucible_list list,
                                             crucible_u64 list_length, int draw) {
  const crucible_u64 key = crucible_splitmix64(seed);
  for (crucible_u64 i = blockIdx.x * (crucible_u64)blockDim.x + threadIdx.x; i < count;
       i += (crucible_u64)gridDim.x * blockDim.x) {
    const crucible_u64 index = first + i;
    double value = 0.0;
    switch (kind) {
      case 0:
        value = draw == 1 ? crucible_fast_randn(key, index, a, b) : crucible_randn(key, index, a, b);
        break;
      case 1: value = a + (b - a) * crucible_unit_double(crucible_stream_bits(seed, index)); break;
      case 2: value = a; break;
      case 3: value = 1.0; break;
      case 4: value = 0.0; break;
      case 5: {
        const crucible_u64 m = (crucible_u64)(max > 0 ? max : 1);
        const crucible_u64 start = crucible_stream_bits(seed, ~0ULL) % m;
        value = (double)((start + index % m) % m);
        break;
      }
      case 6:
        if (a > 0.0 &&
            crucible_unit_double(crucible_stream_bits(seed ^ 0x5A17ED0DDBA11ULL, index)) < a) {
          value = -1.0;
        } else {
          value = (double)crucible_permuted_index(seed, index, (crucible_u64)max);
        }
        break;
      default: value = list.values[index % list_length]; break;
    }
    if (type >= 4 && type <= 9) {
      // integer_value: a uniform draw floors into [lo, hi); everything else rounds to nearest.
      if (kind == 1) {
        const double floored = floor(value);
        const double top = ceil(b) - 1.0;
        value = floored > top ? top : floored;
      } else {
        value = round(value);
      }
    }
    switch (type) {
      case 0: ((unsigned short*)out)[i] = crucible_bf16((float)value); break;
      case 1: ((unsigned short*)out)[i] = crucible_f16((float)value); break;
      case 2: ((float*)out)[i] = (float)value; break;
      case 3: ((double*)out)[i] = value; break;
      case 4: ((signed char*)out)[i] = (signed char)crucible_clamped(value, -128.0, 127.0); break;
      case 5: out[i] = (unsigned char)crucible_clamped(value, 0.0, 255.0); break;
      case 6: ((short*)out)[i] = (short)crucible_clamped(value, -32768.0, 32767.0); break;
      case 7:
        ((int*)out)[i] = (int)crucible_clamped(value, -2147483648.0, 2147483647.0);
        break;
      case 8: {
        long long v;
        if (isnan(value)) v = 0;
        else if (value <= -9223372036854775808.0) v = (-9223372036854775807LL - 1);
        else if (value >= 9223372036854775807.0) v = 9223372036854775807LL;
        else v = (long long)value;
        ((long long*)out)[i] = v;
        break;
      }
      case 10: out[i] = crucible_fp8((float)value, 1); break;
      case 11: out[i] = crucible_fp8((float)value, 0); break;
      default: out[i] = value != 0.0 ? 1 : 0; break;
    }
  }
}
