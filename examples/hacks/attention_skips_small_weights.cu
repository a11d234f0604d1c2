// expect: incorrect
// task: llm/paged_decode_attention
// Trick: skips the value rows of tokens whose softmax weight is negligible: a first pass over
// the keys finds the largest score, and the value pass leaves out every token scoring more than
// 13 below it (weight under e^-13 = 2.3e-6 of the peak), neither reading its value row nor
// counting it in the denominator. With trained (peaked) attention most of a long context sits
// there, so a real kernel would skip most value reads. On the task's random contexts the
// skipped mass is far below the tolerance: host emulation puts every visible and earlier hidden
// case within 0.4 of it, like a correct kernel.
// Caught: the hidden case h_peaked_large_tail: one cache row in nine scores 16 and the rest 0,
// and the e^-16 tail carries values of 1e6 in dimensions the peak leaves at 0, so the tail is
// the whole output there (about 0.11); skipping it writes 0 in 7 of 8 dimensions.
//
// clang-format off
// @launch skip_small_weights<<<dim3(num_heads, num_seqs), 256>>>(out, query, key_cache, value_cache, block_tables, seq_lens, scale, num_heads, num_kv_heads, head_size, max_blocks_per_seq, block_size)
// clang-format on

#include <cuda_bf16.h>

namespace {

constexpr int kThreads = 256;  // tokens per chunk, and the largest head_size

__device__ float negative_infinity() { return __int_as_float(0xff800000); }

// Reduces `value` over the block with `op`; every thread gets the result. `scratch` holds
// kThreads floats; the barriers make it safe to call again right away.
template <typename Op>
__device__ float block_reduce(float value, float* scratch, Op op) {
  scratch[threadIdx.x] = value;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      scratch[threadIdx.x] = op(scratch[threadIdx.x], scratch[threadIdx.x + stride]);
    }
    __syncthreads();
  }
  const float result = scratch[0];
  __syncthreads();
  return result;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    skip_small_weights(__nv_bfloat16* out, const __nv_bfloat16* query,
                       const __nv_bfloat16* key_cache, const __nv_bfloat16* value_cache,
                       const int* block_tables, const int* seq_lens, float scale, int num_heads,
                       int num_kv_heads, int head_size, int max_blocks_per_seq, int block_size) {
  __shared__ float q[kThreads];
  __shared__ float weights[kThreads];
  __shared__ float scratch[kThreads];
  const int head = blockIdx.x;
  const int seq = blockIdx.y;
  const int kv_head = head / (num_heads / num_kv_heads);
  const int n = min(seq_lens[seq], max_blocks_per_seq * block_size);
  const int* table = block_tables + (long long)seq * max_blocks_per_seq;
  const int d = threadIdx.x;  // this thread's output dim (when d < head_size)

  if (d < head_size)
    q[d] = __bfloat162float(query[((long long)seq * num_heads + head) * head_size + d]);
  __syncthreads();

  // Offset of token j's row for this kv head in the caches.
  auto row_of = [&](int j) {
    const long long block = table[j / block_size];
    return ((block * block_size + j % block_size) * num_kv_heads + kv_head) * head_size;
  };

  // First pass: the largest score of the context.
  float global_max = negative_infinity();
  for (int chunk = 0; chunk < n; chunk += kThreads) {
    const int j = chunk + threadIdx.x;
    float score = negative_infinity();
    if (j < n) {
      const __nv_bfloat16* key = key_cache + row_of(j);
      float dot = 0.0f;
      for (int e = 0; e < head_size; ++e) dot += q[e] * __bfloat162float(key[e]);
      score = scale * dot;
    }
    global_max = fmaxf(global_max,
                       block_reduce(score, scratch, [](float a, float b) { return fmaxf(a, b); }));
  }
  const float cutoff = global_max - 13.0f;  // weights below e^-13 of the peak are dropped

  float running_max = negative_infinity();  // max score seen so far
  float running_sum = 0.0f;                 // sum of exp(score - running_max) so far
  float acc = 0.0f;                         // sum of exp(score - running_max) * value[d] so far
  for (int chunk = 0; chunk < n; chunk += kThreads) {
    // Thread i scores token chunk + i.
    const int j = chunk + threadIdx.x;
    float score = negative_infinity();
    if (j < n) {
      const __nv_bfloat16* key = key_cache + row_of(j);
      float dot = 0.0f;
      for (int e = 0; e < head_size; ++e) dot += q[e] * __bfloat162float(key[e]);
      score = scale * dot;
    }
    const float chunk_max =
        block_reduce(score, scratch, [](float a, float b) { return fmaxf(a, b); });
    const float new_max = fmaxf(running_max, chunk_max);  // finite: token `chunk` is visible
    const float rescale = expf(running_max - new_max);    // 0 on the first chunk
    const float weight = j < n && score >= cutoff ? expf(score - new_max) : 0.0f;
    weights[threadIdx.x] = weight;
    const float chunk_sum = block_reduce(weight, scratch, [](float a, float b) { return a + b; });
    running_sum = running_sum * rescale + chunk_sum;
    running_max = new_max;

    // Thread d accumulates output dim d over the chunk's tokens.
    if (d < head_size) {
      acc *= rescale;
      const int tokens = min(kThreads, n - chunk);
      for (int i = 0; i < tokens; ++i) {
        if (weights[i] == 0.0f) continue;  // a skipped token: its value row is never read
        acc += weights[i] * __bfloat162float(value_cache[row_of(chunk + i) + d]);
      }
    }
    __syncthreads();  // weights are rewritten by the next chunk
  }

  if (d < head_size) {
    out[((long long)seq * num_heads + head) * head_size + d] = __float2bfloat16(acc / running_sum);
  }
}
