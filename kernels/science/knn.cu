// Reference for science/knn: the k nearest reference points of every query point, per cloud of
// a batch (PyTorch3D knn_points / Pointcept pointops knn_query, brute force), fp32:
//
//   dists[b, q, j] = |query[b, q] - ref[b, idx[b, q, j]]|^2, ascending in j (j < k), idx the k
//   reference points nearest to query q (equal distances: the lower index first).
//
// Launch plan: a thread per query, 128 queries a block; the block walks the cloud's reference
// points in tiles of kTile staged in shared memory; each thread keeps its k best in registers,
// sorted, and inserts a candidate only when it beats the current k-th (rare after the first
// tiles, so the inner loop is three subtractions, three multiply-adds and one compare).
//
// @launch if (k == 16) knn_brute<16><<<dim3(cdiv(num_query, 128), batch), 128>>>(dists, idx,
//   query, ref, num_query, num_ref, k)
// @launch if (k == 32) knn_brute<32><<<dim3(cdiv(num_query, 128), batch), 128>>>(dists, idx,
//   query, ref, num_query, num_ref, k)
// @launch if (k != 16 && k != 32 && k <= 8) knn_brute<8><<<dim3(cdiv(num_query, 128), batch),
//   128>>>(dists, idx, query, ref, num_query, num_ref, k)
// @launch if (k != 16 && k != 32 && k > 8 && k <= 64) knn_brute<64><<<dim3(cdiv(num_query, 128),
//   batch), 128>>>(dists, idx, query, ref, num_query, num_ref, k)
//
// Design notes:
// - Compute bound: Q x R distance evaluations (16 x 4096 x 4096 = 268 M at the largest case).
//   Reference tiles are read once per block from L2 into shared memory as float4-padded points,
//   and every thread of the block reads the same point at once (a shared-memory broadcast).
// - The k-best list is a fully unrolled array, so it stays in registers: an insertion shifts
//   entries with selects instead of a data-dependent loop. Slots past the task's k (the
//   templates for k <= 8 and k <= 64) keep +inf and take no part.
// - num_ref >= k is guaranteed; the list starts at +inf with index -1 and is written in full.

namespace {

constexpr int kThreads = 128;
constexpr int kTile = 1024;

__device__ __forceinline__ float positive_infinity() { return __int_as_float(0x7f800000); }

}  // namespace

template <int kMax>
__global__ void __launch_bounds__(kThreads)
    knn_brute(float* __restrict__ dists, long long* __restrict__ idx,
              const float* __restrict__ query, const float* __restrict__ ref, int num_query,
              int num_ref, int k) {
  __shared__ float4 tile[kTile];
  const int b = blockIdx.y;
  const int q = blockIdx.x * kThreads + threadIdx.x;
  const float* cloud = ref + static_cast<long long>(b) * num_ref * 3;
  float qx = 0.0f, qy = 0.0f, qz = 0.0f;
  if (q < num_query) {
    const float* p = query + (static_cast<long long>(b) * num_query + q) * 3;
    qx = p[0], qy = p[1], qz = p[2];
  }
  float best[kMax];
  int best_at[kMax];
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    best[j] = positive_infinity();
    best_at[j] = -1;
  }
  for (int start = 0; start < num_ref; start += kTile) {
    const int count = min(kTile, num_ref - start);
    __syncthreads();
    for (int t = threadIdx.x; t < count; t += kThreads) {
      const float* p = cloud + static_cast<long long>(start + t) * 3;
      tile[t] = make_float4(p[0], p[1], p[2], 0.0f);
    }
    __syncthreads();
    for (int t = 0; t < count; ++t) {
      const float4 r = tile[t];
      const float dx = qx - r.x, dy = qy - r.y, dz = qz - r.z;
      const float d = fmaf(dx, dx, fmaf(dy, dy, dz * dz));
      float bound = best[kMax - 1];
      if (kMax != 16 && kMax != 32) {
        // The task's k may be below the template's: the bound is slot k - 1.
#pragma unroll
        for (int j = 0; j < kMax; ++j) bound = j == k - 1 ? best[j] : bound;
      }
      if (d < bound) {
        const int at = start + t;
#pragma unroll
        for (int j = kMax - 1; j > 0; --j) {
          const bool shift = d < best[j - 1];
          const bool here = !shift && d < best[j];
          best[j] = shift ? best[j - 1] : (here ? d : best[j]);
          best_at[j] = shift ? best_at[j - 1] : (here ? at : best_at[j]);
        }
        if (d < best[0]) {
          best[0] = d;
          best_at[0] = at;
        }
      }
    }
  }
  if (q >= num_query) return;
  const long long out = (static_cast<long long>(b) * num_query + q) * k;
#pragma unroll
  for (int j = 0; j < kMax; ++j) {
    if (j < k) {
      dists[out + j] = best[j];
      idx[out + j] = best_at[j];
    }
  }
}
