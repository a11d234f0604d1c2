// Reference for llm/topk_softmax: vLLM's MoE router, softmax over experts then top-k, in fp32.
//
// For every token t (a row of gating_output, [num_tokens, num_experts] f32):
//
//   p[e] = exp(g[e] - max g) / sum_e exp(g[e] - max g)
//   the topk largest p in descending order (exact ties: the lower expert index first):
//   topk_weights[t, j] = p[e_j], topk_indices[t, j] = e_j,
//   token_expert_indices[t, j] = j * num_tokens + t
//
// No renormalisation of the k weights (vLLM does that outside the op).
//
// Launch plan (DESIGN.md section 2): one kernel per expert count the reference specialises,
// chosen by the guards; every other count takes the general kernel. 128 threads per block.
//
// @launch if (num_experts == 8) topk_softmax_e8<<<cdiv(num_tokens, 64), 128>>>(topk_weights, topk_indices, token_expert_indices, gating_output, num_tokens, topk)
// @launch if (num_experts == 128) topk_softmax_e128<<<cdiv(num_tokens, 4), 128>>>(topk_weights, topk_indices, token_expert_indices, gating_output, num_tokens, topk)
// @launch if (num_experts == 256) topk_softmax_e256<<<cdiv(num_tokens, 4), 128>>>(topk_weights, topk_indices, token_expert_indices, gating_output, num_tokens, topk)
// @launch if (num_experts != 8 && num_experts != 128 && num_experts != 256) topk_softmax_any<<<cdiv(num_tokens, 4), 128>>>(topk_weights, topk_indices, token_expert_indices, gating_output, num_tokens, num_experts, topk)
//
// Design notes (why, for whoever optimises this next):
// - The op moves a few hundred bytes per token and is latency bound at decode sizes, so the
//   whole row lives in registers after one pass of 16-byte loads, and every reduction (max,
//   sum, k rounds of argmax) is a shuffle butterfly inside the lanes that own the row: no
//   shared memory, no barrier.
// - A row is owned by kThreadsPerRow lanes holding 4 or 8 logits each. 8 experts: 2 lanes per
//   row (16 rows per warp), so a warp still issues full 16-byte loads; 128 and 256 experts: a
//   whole warp per row, one or two float4 per lane, consecutive lanes on consecutive vectors.
// - Each argmax round reduces (value, expert) pairs and breaks ties toward the lower expert
//   index, as vLLM does; the owner of the winner then overwrites it with -1, below every
//   probability, so the next round finds the next expert. k rounds cost k * log2(lanes)
//   shuffles, which for k <= 8 is less than a sort.
// - The general kernel (expert counts that are not specialised) keeps nothing in registers: a
//   warp per row re-reads the row from L1 in each pass and each round takes the best expert
//   strictly after the previous winner in (probability descending, index ascending) order.

namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;  // the directives launch 128 threads

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

// A row of kExperts logits owned by kThreadsPerRow consecutive lanes; lane `sub` of the row
// holds float4 vectors sub, sub + kThreadsPerRow, ... of the row.
template <int kExperts, int kThreadsPerRow>
__device__ __forceinline__ void route_cached_row(float* __restrict__ topk_weights,
                                                 int* __restrict__ topk_indices,
                                                 int* __restrict__ token_expert_indices,
                                                 const float* __restrict__ gating_output,
                                                 int num_tokens, int topk) {
  constexpr int kPerLane = kExperts / kThreadsPerRow;
  constexpr int kVectors = kPerLane / 4;
  constexpr int kRowsPerWarp = kWarpSize / kThreadsPerRow;
  static_assert(kPerLane % 4 == 0 && kVectors >= 1, "each lane holds whole float4 vectors");
  static_assert(kWarpSize % kThreadsPerRow == 0, "rows tile the warp");

  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int sub = lane % kThreadsPerRow;
  const int row = (blockIdx.x * kWarpsPerBlock + warp) * kRowsPerWarp + lane / kThreadsPerRow;
  // Uniform across the lanes of a row, so the row's shuffles below see all of its lanes.
  if (row >= num_tokens) return;
  const unsigned row_mask =
      kThreadsPerRow == kWarpSize ? 0xffffffffu : ((1u << kThreadsPerRow) - 1u) << (lane - sub);

  const float4* row_vectors =
      reinterpret_cast<const float4*>(gating_output + static_cast<size_t>(row) * kExperts);
  float p[kPerLane];
#pragma unroll
  for (int v = 0; v < kVectors; ++v) {
    const float4 x = row_vectors[sub + v * kThreadsPerRow];
    p[4 * v + 0] = x.x;
    p[4 * v + 1] = x.y;
    p[4 * v + 2] = x.z;
    p[4 * v + 3] = x.w;
  }

  float row_max = p[0];
#pragma unroll
  for (int i = 1; i < kPerLane; ++i) row_max = fmaxf(row_max, p[i]);
#pragma unroll
  for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2) {
    row_max = fmaxf(row_max, __shfl_xor_sync(row_mask, row_max, offset, kThreadsPerRow));
  }
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    p[i] = expf(p[i] - row_max);
    sum += p[i];
  }
#pragma unroll
  for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(row_mask, sum, offset, kThreadsPerRow);
  }
  const float inverse_sum = 1.0f / sum;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) p[i] *= inverse_sum;

  const size_t out_base = static_cast<size_t>(row) * topk;
  for (int j = 0; j < topk; ++j) {
    // Local argmax in ascending column order: strict > keeps the lower column on ties.
    float best = p[0];
    int best_expert = 4 * sub;
#pragma unroll
    for (int v = 0; v < kVectors; ++v) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (p[4 * v + i] > best) {
          best = p[4 * v + i];
          best_expert = 4 * (sub + v * kThreadsPerRow) + i;
        }
      }
    }
#pragma unroll
    for (int offset = kThreadsPerRow / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(row_mask, best, offset, kThreadsPerRow);
      const int other_expert = __shfl_xor_sync(row_mask, best_expert, offset, kThreadsPerRow);
      if (other > best || (other == best && other_expert < best_expert)) {
        best = other;
        best_expert = other_expert;
      }
    }
    if (sub == 0) {
      topk_weights[out_base + j] = best;
      topk_indices[out_base + j] = best_expert;
      token_expert_indices[out_base + j] = j * num_tokens + row;
    }
    // The owner retires the winner: -1 lies below every probability.
#pragma unroll
    for (int v = 0; v < kVectors; ++v) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (4 * (sub + v * kThreadsPerRow) + i == best_expert) p[4 * v + i] = -1.0f;
      }
    }
  }
}

__device__ __forceinline__ float warp_max(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  }
  return value;
}

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(128)
    topk_softmax_e8(float* __restrict__ topk_weights, int* __restrict__ topk_indices,
                    int* __restrict__ token_expert_indices, const float* __restrict__ gating_output,
                    int num_tokens, int topk) {
  route_cached_row<8, 2>(topk_weights, topk_indices, token_expert_indices, gating_output,
                         num_tokens, topk);
}

extern "C" __global__ void __launch_bounds__(128)
    topk_softmax_e128(float* __restrict__ topk_weights, int* __restrict__ topk_indices,
                      int* __restrict__ token_expert_indices,
                      const float* __restrict__ gating_output, int num_tokens, int topk) {
  route_cached_row<128, 32>(topk_weights, topk_indices, token_expert_indices, gating_output,
                            num_tokens, topk);
}

extern "C" __global__ void __launch_bounds__(128)
    topk_softmax_e256(float* __restrict__ topk_weights, int* __restrict__ topk_indices,
                      int* __restrict__ token_expert_indices,
                      const float* __restrict__ gating_output, int num_tokens, int topk) {
  route_cached_row<256, 32>(topk_weights, topk_indices, token_expert_indices, gating_output,
                            num_tokens, topk);
}

// Any expert count: one warp per row, the row re-read (from L1) in every pass.
extern "C" __global__ void __launch_bounds__(128)
    topk_softmax_any(float* __restrict__ topk_weights, int* __restrict__ topk_indices,
                     int* __restrict__ token_expert_indices,
                     const float* __restrict__ gating_output, int num_tokens, int num_experts,
                     int topk) {
  const int lane = threadIdx.x % kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (row >= num_tokens) return;  // uniform across the warp
  const float* x = gating_output + static_cast<size_t>(row) * num_experts;

  float row_max = negative_infinity();
  for (int e = lane; e < num_experts; e += kWarpSize) row_max = fmaxf(row_max, x[e]);
  row_max = warp_max(row_max);
  float sum = 0.0f;
  for (int e = lane; e < num_experts; e += kWarpSize) sum += expf(x[e] - row_max);
  const float inverse_sum = 1.0f / warp_sum(sum);

  // Round j takes the best expert strictly after round j - 1's winner in the order
  // (probability descending, index ascending); the same expression gives the same float in
  // every pass, so no expert is taken twice.
  float previous = __int_as_float(0x7f800000);  // +inf: everything comes after it
  int previous_expert = -1;
  const size_t out_base = static_cast<size_t>(row) * topk;
  for (int j = 0; j < topk; ++j) {
    float best = -1.0f;
    int best_expert = 0x7fffffff;
    for (int e = lane; e < num_experts; e += kWarpSize) {
      const float p = expf(x[e] - row_max) * inverse_sum;
      const bool after_previous = p < previous || (p == previous && e > previous_expert);
      if (after_previous && p > best) {
        best = p;
        best_expert = e;
      }
    }
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_expert = __shfl_xor_sync(0xffffffffu, best_expert, offset);
      if (other > best || (other == best && other_expert < best_expert)) {
        best = other;
        best_expert = other_expert;
      }
    }
    if (lane == 0) {
      topk_weights[out_base + j] = best;
      topk_indices[out_base + j] = best_expert;
      token_expert_indices[out_base + j] = j * num_tokens + row;
    }
    previous = best;
    previous_expert = best_expert;
  }
}
