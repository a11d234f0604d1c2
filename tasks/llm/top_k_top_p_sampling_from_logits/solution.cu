// A correct, deliberately simple solution for llm/top_k_top_p_sampling_from_logits: one block per
// row, every threshold found by bisection over the logits' integer keys with a full pass over the
// row per step, and the draw by per-thread contiguous ranges.
//
// Much slower than the reference (about 70 passes over the row instead of three), but right on
// every shape.
//
// clang-format off
// @launch sampling_simple<<<batch_size, 256>>>(logits, uniform_samples, top_k, top_p, samples, vocab_size)
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

extern "C" __global__ void sampling_simple(const float* logits, const float* uniform_samples,
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
  if (p < 1.0f) {
    // Every finite logit has a key above 0, so this is the mass of K.
    const float z_k = above(row, vocab_size, threshold, 0u, true, m, scratch);
    threshold = bisect(row, vocab_size, threshold, p * z_k, true, m, scratch);
  }

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
    const float target = uniform_samples[blockIdx.x] * total;
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
