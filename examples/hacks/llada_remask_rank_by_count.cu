// expect: incorrect
// task: world/llada_remask
// Trick: picks a row's positions in one parallel pass instead of k sequential selections: a
// masked position is unmasked when fewer than k_b masked positions of its row score strictly
// higher (its rank by counting). With distinct scores exactly k_b positions have rank below
// k_b, and k_b larger than the masked count selects every masked position, as it should. The
// scores are the log-confidence plus continuous noise, so two positions of a row tie exactly
// only by a coincidence of fp32 bits: every visible case and every hidden case but one gets
// exactly the top-k_b positions.
// Caught: the hidden case h_tied (every row the same logit pattern and zero noise, so all 24
// masked positions of a row score alike): every masked position has rank 0 and all 24 are
// unmasked where k_b is 3 and 5, and the checker requires exactly k_b positions.
// clang-format off
// @workspace score float[batch * seq_len]
// @launch row_confidence<<<batch * seq_len, 256>>>(x0, score, logits, x, noise, mask_id, vocab)
// @launch pick_by_rank<<<batch, 256>>>(transfer_index, score, x, num_transfer_tokens, mask_id, seq_len)
// clang-format on

#include <cuda_bf16.h>

extern "C" __global__ void row_confidence(long long* x0, float* score, const __nv_bfloat16* logits,
                                          const long long* x, const float* noise, long long mask_id,
                                          int vocab) {
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

// One block per sequence; each thread ranks its positions against the row.
extern "C" __global__ void pick_by_rank(signed char* transfer_index, const float* score,
                                        const long long* x, const long long* num_transfer_tokens,
                                        long long mask_id, int seq_len) {
  const long long base = static_cast<long long>(blockIdx.x) * seq_len;
  const long long k = num_transfer_tokens[blockIdx.x];
  for (int l = threadIdx.x; l < seq_len; l += blockDim.x) {
    signed char chosen = 0;
    if (x[base + l] == mask_id) {
      long long higher = 0;
      for (int m = 0; m < seq_len; ++m) {
        higher += x[base + m] == mask_id && score[base + m] > score[base + l];
      }
      chosen = higher < k ? 1 : 0;
    }
    transfer_index[base + l] = chosen;
  }
}
