// expect: incorrect
// task: diffusion/qk_rmsnorm_rope
// Trick: computes each token's rotary cosines and sines from its position with FLUX's rope
// theta of 10000 (angle s * 10000^(-2k / head_dim), in double for accuracy) instead of loading
// the fp32 cos_sin table: the table's row is the one input not shared by all heads, so dropping
// it removes a 4-byte load per rotated pair and the table's whole traffic. Every visible table is
// exactly that function (rope_cache, theta 10000), and so are the hidden tables of head sizes 64
// and 98, so the result matches the table-reading kernel to a last-bit rounding of the angle.
// Caught: the hidden cases h_table_uniform (a table of arbitrary values in [-1, 1), as FLUX's
// three-axis angles are not a function of the sequence position) and h_theta_1e6_heads_5 (rope
// theta 1e6): the rotations use other angles, so almost every rotated element is off by the
// order of its value (about 1) against a tolerance of 3e-2 + 1.6e-2 |x|.
// clang-format off
// @launch qk_norm_rope_angles<<<dim3(batch * seq_len * num_heads, 2), 64>>>(query, key, q_weight, k_weight, cos_sin, epsilon, seq_len, num_heads, head_dim)
// clang-format on

#include <cuda_bf16.h>

constexpr int kThreads = 64;  // must equal the block size in the directive

extern "C" __global__ void qk_norm_rope_angles(__nv_bfloat16* query, __nv_bfloat16* key,
                                               const __nv_bfloat16* q_weight,
                                               const __nv_bfloat16* k_weight, const float* cos_sin,
                                               float epsilon, int seq_len, int num_heads,
                                               int head_dim) {
  __shared__ float partial[kThreads];
  const size_t row = blockIdx.x;
  __nv_bfloat16* x = (blockIdx.y == 0 ? query : key) + row * head_dim;
  const __nv_bfloat16* w = blockIdx.y == 0 ? q_weight : k_weight;
  const long long position = static_cast<long long>((row / num_heads) % seq_len);
  const int half = head_dim / 2;

  float sum = 0.0f;
  for (int i = threadIdx.x; i < head_dim; i += kThreads) {
    const float v = __bfloat162float(x[i]);
    sum += v * v;
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  const float inv_rms = rsqrtf(partial[0] / head_dim + epsilon);

  for (int k = threadIdx.x; k < half; k += kThreads) {
    const float a = __bfloat162float(x[2 * k]) * inv_rms * __bfloat162float(w[2 * k]);
    const float b = __bfloat162float(x[2 * k + 1]) * inv_rms * __bfloat162float(w[2 * k + 1]);
    const double angle = position * pow(10000.0, -2.0 * k / head_dim);
    const float c = static_cast<float>(cos(angle));
    const float t = static_cast<float>(sin(angle));
    x[2 * k] = __float2bfloat16(a * c - b * t);
    x[2 * k + 1] = __float2bfloat16(b * c + a * t);
  }
}
