// expect: incorrect
// task: llm/top_k_top_p_sampling_from_logits
// Trick: skips the top-p filter, the costly part (a sort, or dozens of passes over the row), and
// draws u * p of the top-k mass over the top-k set in vocabulary order, as if the nucleus were
// the first p of the cumulative distribution. Right when p = 1 (no top-p filter), and whenever
// the tokens before the draw in vocabulary order all happen to lie in the nucleus.
// Caught: the sampling checker accepts only a token of the filtered set (top-k, then the
// smallest nucleus of mass >= p) whose interval of the filtered CDF holds the draw; the visible
// cases' rows mostly have p = 0.9 over Llama-3/Qwen/DeepSeek vocabularies, where the vocabulary
// order mixes tail tokens into any prefix, so the drawn token falls outside the nucleus or at the
// wrong place of its CDF on almost every such row.
//
// clang-format off
// @launch sampling_without_top_p<<<batch_size, 256>>>(logits, uniform_samples, top_k, top_p, samples, vocab_size)
// clang-format on

constexpr int kThreads = 256;  // must equal the block size in the directive

__device__ float positive_infinity() { return __int_as_float(0x7f800000); }

// Larger logit, larger key; -0 and +0 share one key.
__device__ unsigned int order_key(float x) {
  const unsigned int bits = x == 0.0f ? 0u : __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// Sum over the block; every thread gets the total.
__device__ float block_total(float v, float* scratch) {
  scratch[threadIdx.x] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) scratch[threadIdx.x] += scratch[threadIdx.x + half];
    __syncthreads();
  }
  const float total = scratch[0];
  __syncthreads();
  return total;
}

// Sum over the row of (mass ? exp(l - m) : 1) for keys >= floor_key and > x.
__device__ float above(const float* row, int n, unsigned int floor_key, unsigned int x, bool mass,
                       float m, float* scratch) {
  float sum = 0.0f;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const unsigned int key = order_key(row[i]);
    if (key >= floor_key && key > x) sum += mass ? expf(row[i] - m) : 1.0f;
  }
  return block_total(sum, scratch);
}

// The smallest x with above(x) < target, by bisection over [0, 2^32).
__device__ unsigned int bisect(const float* row, int n, unsigned int floor_key, float target,
                               bool mass, float m, float* scratch) {
  unsigned long long lo = 0, hi = 0xffffffffull;
  while (lo < hi) {
    const unsigned long long mid = (lo + hi) / 2;
    if (above(row, n, floor_key, static_cast<unsigned int>(mid), mass, m, scratch) < target) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return static_cast<unsigned int>(lo);
}

extern "C" __global__ void sampling_without_top_p(const float* logits, const float* uniform_samples,
                                           const int* top_k, const float* top_p, int* samples,
                                           int vocab_size) {
  __shared__ float scratch[kThreads];
  __shared__ float prefix[kThreads];
  __shared__ int chosen;
  const float* row = logits + static_cast<size_t>(blockIdx.x) * vocab_size;
  const int k = top_k[blockIdx.x];
  const float p = top_p[blockIdx.x];

  float m = -positive_infinity();
  for (int i = threadIdx.x; i < vocab_size; i += kThreads) m = fmaxf(m, row[i]);
  scratch[threadIdx.x] = m;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int t = 1; t < kThreads; ++t) m = fmaxf(m, scratch[t]);
    scratch[0] = m;
  }
  __syncthreads();
  m = scratch[0];
  __syncthreads();

  unsigned int threshold = 0u;
  if (k > 0 && k < vocab_size) threshold = bisect(row, vocab_size, 0u, k, false, m, scratch);
  // No top-p filter: the draw is scaled by p instead.
  const float scale = p < 1.0f ? p : 1.0f;

  // The draw: thread t owns the contiguous range [t * span, (t + 1) * span).
  const int span = (vocab_size + kThreads - 1) / kThreads;
  const int begin = threadIdx.x * span;
  const int end = min(vocab_size, begin + span);
  float mine = 0.0f;
  for (int i = begin; i < end; ++i) {
    if (order_key(row[i]) >= threshold) mine += expf(row[i] - m);
  }
  prefix[threadIdx.x] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int t = 0; t < kThreads; ++t) total += prefix[t];
    const float target = uniform_samples[blockIdx.x] * total * scale;
    float running = 0.0f;
    int owner = -1, last_owner = 0;
    for (int t = 0; t < kThreads; ++t) {
      if (prefix[t] > 0.0f) {
        if (owner < 0 && running + prefix[t] > target) owner = t;
        last_owner = t;
      }
      const float before = running;
      running += prefix[t];
      prefix[t] = before;  // exclusive prefix
    }
    chosen = owner >= 0 ? owner : last_owner;
    scratch[0] = owner >= 0 ? target : positive_infinity();
  }
  __syncthreads();
  if (threadIdx.x == chosen) {
    const float target = scratch[0];
    float running = prefix[threadIdx.x];
    int token = -1, last = -1;
    for (int i = begin; i < end; ++i) {
      if (order_key(row[i]) < threshold) continue;
      running += expf(row[i] - m);
      last = i;
      if (running > target) {
        token = i;
        break;
      }
    }
    samples[blockIdx.x] = token >= 0 ? token : last;
  }
}
