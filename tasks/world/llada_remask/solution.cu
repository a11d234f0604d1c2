// Example solution for world/llada_remask: a block per position scans its vocabulary row twice
// (maximum, then the sum of exponentials), then one thread per row picks the k best positions by
// repeated selection.
//
// @workspace score float[batch * seq_len]
// @launch row_confidence<<<batch * seq_len, 256>>>(x0, score, logits, x, noise, mask_id, vocab)
// @launch pick_positions<<<cdiv(batch, 64), 64>>>(transfer_index, score, x, num_transfer_tokens,
//   mask_id, batch, seq_len)

#include <cuda_bf16.h>

extern "C" __global__ void row_confidence(long long* x0, float* score,
                                          const __nv_bfloat16* logits, const long long* x,
                                          const float* noise, long long mask_id, int vocab) {
  const long long row = blockIdx.x;
  if (x[row] != mask_id) {
    if (threadIdx.x == 0) x0[row] = x[row];
    return;
  }
  const __nv_bfloat16* v = logits + row * vocab;
  __shared__ float best[256];
  __shared__ int best_at[256];
  float m = -3.0e38f;
  int at = vocab;
  for (int t = threadIdx.x; t < vocab; t += blockDim.x) {
    const float value = __bfloat162float(v[t]);
    if (value > m) {
      m = value;
      at = t;
    }
  }
  best[threadIdx.x] = m;
  best_at[threadIdx.x] = at;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float other = best[threadIdx.x + half];
      const int other_at = best_at[threadIdx.x + half];
      if (other > best[threadIdx.x] ||
          (other == best[threadIdx.x] && other_at < best_at[threadIdx.x])) {
        best[threadIdx.x] = other;
        best_at[threadIdx.x] = other_at;
      }
    }
    __syncthreads();
  }
  const float row_max = best[0];
  const int row_arg = best_at[0];
  __syncthreads();
  float sum = 0.0f;
  for (int t = threadIdx.x; t < vocab; t += blockDim.x) {
    sum += expf(__bfloat162float(v[t]) - row_max);
  }
  best[threadIdx.x] = sum;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (threadIdx.x < half) best[threadIdx.x] += best[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    x0[row] = row_arg;
    score[row] = noise[row] - logf(best[0]);
  }
}

extern "C" __global__ void pick_positions(signed char* transfer_index, const float* score,
                                          const long long* x, const long long* num_transfer_tokens,
                                          long long mask_id, int batch, int seq_len) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const long long base = static_cast<long long>(b) * seq_len;
  for (int l = 0; l < seq_len; ++l) transfer_index[base + l] = 0;
  for (long long picked = 0; picked < num_transfer_tokens[b]; ++picked) {
    int best = -1;
    for (int l = 0; l < seq_len; ++l) {
      if (x[base + l] != mask_id || transfer_index[base + l] != 0) continue;
      if (best < 0 || score[base + l] > score[base + best]) best = l;
    }
    if (best < 0) break;
    transfer_index[base + best] = 1;
  }
}
