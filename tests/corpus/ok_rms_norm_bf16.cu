// A correct bf16 RMSNorm (vLLM rms_norm interface): must compile with resources reported.
// @launch rms_norm_kernel<256><<<num_tokens, 256>>>(out, input, weight, epsilon, hidden_size)
template <int kBlock>
__global__ void rms_norm_kernel(__nv_bfloat16* __restrict__ out,
                                const __nv_bfloat16* __restrict__ input,
                                const __nv_bfloat16* __restrict__ weight, float epsilon,
                                int hidden_size) {
  __shared__ float partial[kBlock / 32];
  __shared__ float scale;
  const __nv_bfloat16* row = input + static_cast<size_t>(blockIdx.x) * hidden_size;
  float sum = 0.f;
  for (int i = threadIdx.x; i < hidden_size; i += kBlock) {
    const float v = __bfloat162float(row[i]);
    sum += v * v;
  }
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    sum = threadIdx.x < kBlock / 32 ? partial[threadIdx.x] : 0.f;
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x == 0) scale = rsqrtf(sum / hidden_size + epsilon);
  }
  __syncthreads();
  __nv_bfloat16* out_row = out + static_cast<size_t>(blockIdx.x) * hidden_size;
  for (int i = threadIdx.x; i < hidden_size; i += kBlock) {
    out_row[i] = __float2bfloat16(__bfloat162float(row[i]) * scale * __bfloat162float(weight[i]));
  }
}
