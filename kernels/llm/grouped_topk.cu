// Reference for llm/grouped_topk: DeepSeek-V3's router (vLLM grouped_topk, sigmoid scoring with
// e_score_correction_bias), fused into one kernel, fp32.
//
// For every token t (a row of gating_output, [num_tokens, num_experts] f32), with
// G = num_expert_group groups of n = num_experts / G consecutive experts:
//
//   s[e] = sigmoid(g[e]);  c[e] = s[e] + bias[e]
//   group score = the sum of the two largest c in the group
//   keep the topk_group best groups (exact ties: the lower group index)
//   choose the topk largest c among kept experts, in descending order (ties: lower index)
//   topk_weights[t, j] = s[e_j] (/ sum_i s[e_i] if renormalize) * routed_scaling_factor
//   topk_ids[t, j] = e_j
//
// Launch plan (DESIGN.md section 2): DeepSeek-V3's 256 experts take the register kernel; any
// other expert count the general one. 128 threads per block, one warp per token.
//
// @launch if (num_experts == 256) grouped_topk_e256<<<cdiv(num_tokens, 4), 128>>>(topk_weights,
// topk_ids, gating_output, e_score_correction_bias, num_expert_group, topk_group, renormalize,
// routed_scaling_factor, num_tokens, topk)
// @launch if (num_experts != 256) grouped_topk_any<<<cdiv(num_tokens, 4), 128>>>(topk_weights,
// topk_ids, gating_output, e_score_correction_bias, num_expert_group, topk_group, renormalize,
// routed_scaling_factor, num_tokens, num_experts, topk)
//
// Design notes (why, for whoever optimises this next):
// - vLLM runs this as about ten torch kernels (sigmoid, add, view/topk/sum, topk, scatter,
//   masked_fill, topk, gather, sum, div, mul) with a round trip through memory between each;
//   fused, a token is 1 KiB of logits read once and 64 bytes written.
// - One warp per token; lane l holds experts 8l .. 8l + 7 (two 16-byte loads of logits and of
//   the bias, which every token shares and L1 keeps). With groups of 32 experts a group is 4
//   adjacent lanes, so its top-2 is a 2-step xor butterfly merging (largest, second) pairs,
//   and the lanes of a group end up with the same group score bit for bit.
// - The group ranking reads the G group scores by shuffles (G = 8) and counts, per lane, the
//   groups that beat its own; experts of groups ranked topk_group or worse are set to -inf.
// - k rounds pick the winners: each lane takes its best remaining c (ties: its lower index),
//   then two warp reductions (redux.sync: the largest order-preserving key of c, then the lowest
//   expert index among the lanes holding it) name the round's winner, whose owner retires it and
//   keeps its round and score; the renormalising sum is one warp sum of the owners' scores at
//   the end, and each owner writes its winners. Two reductions a round replace a 5-step xor
//   butterfly of three shuffles a step (value, index, score): the rounds are the kernel's
//   critical path at decode batches, where the butterflies were 1.23-1.33x FlashInfer's
//   fused_topk_deepseek and the reductions are 1.20-1.28x (h200_parity.json, 2026-12-05; 0.80x
//   at 2048 tokens). FlashInfer spreads a token over 256 threads, a group a warp, and takes the
//   final top-k in one warp over the kept groups' candidates: the next step here.
// - Other layouts (groups that do not fall on whole lanes, other expert counts) take the
//   general path: a warp per token re-reading the row from L1, group scores in shared memory.

namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 4;  // the directives launch 128 threads
constexpr int kMaxGroups = 64;     // the general path's shared group scores, per warp

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// Order-preserving key of a float: larger value, larger key (-inf lowest but NaN's).
__device__ __forceinline__ unsigned order_key(float x) {
  const unsigned bits = __float_as_uint(x);
  return (bits & 0x80000000u) != 0u ? ~bits : (bits | 0x80000000u);
}

// Inserts `value` into a (largest, second largest) pair; a repeated value fills both places.
__device__ __forceinline__ void insert_top2(float value, float& first, float& second) {
  if (value > first) {
    second = first;
    first = value;
  } else if (value > second) {
    second = value;
  }
}

// Merges the partner lane's pair (xor `offset`) into this lane's; both lanes end up equal.
__device__ __forceinline__ void merge_top2(float& first, float& second, int offset) {
  const float other_first = __shfl_xor_sync(0xffffffffu, first, offset);
  const float other_second = __shfl_xor_sync(0xffffffffu, second, offset);
  if (other_first > first) {
    second = fmaxf(other_second, first);
    first = other_first;
  } else {
    second = fmaxf(second, other_first);
  }
}

// Keeps the better of two (choice, expert, score) triples across the warp: higher choice
// first, then the lower expert index.
__device__ __forceinline__ void warp_argmax(float& best, int& best_expert, float& best_score) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const float other = __shfl_xor_sync(0xffffffffu, best, offset);
    const int other_expert = __shfl_xor_sync(0xffffffffu, best_expert, offset);
    const float other_score = __shfl_xor_sync(0xffffffffu, best_score, offset);
    if (other > best || (other == best && other_expert < best_expert)) {
      best = other;
      best_expert = other_expert;
      best_score = other_score;
    }
  }
}

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  }
  return value;
}

// Lane j < topk holds round j's original score and expert; renormalises, scales and writes.
__device__ __forceinline__ void write_row(float* __restrict__ topk_weights,
                                          int* __restrict__ topk_ids, int row, int topk,
                                          float score, int expert, int renormalize,
                                          float routed_scaling_factor) {
  const int lane = threadIdx.x % kWarpSize;
  const bool holds = lane < topk;
  const float sum = warp_sum(holds ? score : 0.0f);
  float weight = renormalize != 0 ? score / sum : score;
  weight *= routed_scaling_factor;
  if (holds) {
    const size_t index = static_cast<size_t>(row) * topk + lane;
    topk_weights[index] = weight;
    topk_ids[index] = expert;
  }
}

// The general path: any expert count and grouping, one warp per row. `group_scores` is this
// warp's kMaxGroups floats of shared memory.
__device__ void route_row_general(float* __restrict__ topk_weights, int* __restrict__ topk_ids,
                                  const float* __restrict__ gating_output,
                                  const float* __restrict__ bias, int num_expert_group,
                                  int topk_group, int renormalize, float routed_scaling_factor,
                                  int row, int num_experts, int topk, float* group_scores) {
  const int lane = threadIdx.x % kWarpSize;
  const float* x = gating_output + static_cast<size_t>(row) * num_experts;
  const int group_size = num_experts / num_expert_group;

  for (int q = 0; q < num_expert_group; ++q) {
    float first = negative_infinity();
    float second = negative_infinity();
    for (int e = q * group_size + lane; e < (q + 1) * group_size; e += kWarpSize) {
      insert_top2(sigmoid(x[e]) + bias[e], first, second);
    }
#pragma unroll
    for (int offset = kWarpSize / 2; offset > 0; offset /= 2) merge_top2(first, second, offset);
    if (lane == 0) group_scores[q] = first + second;
  }
  __syncwarp();

  // Bit q of `kept`: group q ranks among the topk_group best (exact ties: lower index).
  unsigned long long kept = 0;
  for (int base = 0; base < num_expert_group; base += kWarpSize) {
    const int q = base + lane;
    bool keep = false;
    if (q < num_expert_group) {
      const float mine = group_scores[q];
      int rank = 0;
      for (int other = 0; other < num_expert_group; ++other) {
        const float score = group_scores[other];
        rank += (score > mine || (score == mine && other < q)) ? 1 : 0;
      }
      keep = rank < topk_group;
    }
    kept |= static_cast<unsigned long long>(__ballot_sync(0xffffffffu, keep)) << base;
  }
  __syncwarp();  // group_scores is reused by the warp's next row

  // Round j takes the best kept expert strictly after round j - 1's winner in the order
  // (choice descending, index ascending).
  float previous = __int_as_float(0x7f800000);
  int previous_expert = -1;
  float my_score = 0.0f;
  int my_expert = 0;
  for (int j = 0; j < topk; ++j) {
    float best = negative_infinity();
    int best_expert = 0x7fffffff;
    float best_score = 0.0f;
    for (int e = lane; e < num_experts; e += kWarpSize) {
      if (((kept >> (e / group_size)) & 1ull) == 0) continue;
      const float score = sigmoid(x[e]);
      const float choice = score + bias[e];
      const bool after_previous = choice < previous || (choice == previous && e > previous_expert);
      if (after_previous && (choice > best || (choice == best && e < best_expert))) {
        best = choice;
        best_expert = e;
        best_score = score;
      }
    }
    warp_argmax(best, best_expert, best_score);
    if (lane == j) {
      my_score = best_score;
      my_expert = best_expert;
    }
    previous = best;
    previous_expert = best_expert;
  }
  write_row(topk_weights, topk_ids, row, topk, my_score, my_expert, renormalize,
            routed_scaling_factor);
}

}  // namespace

// 256 experts (DeepSeek-V3): lane l holds experts 8l .. 8l + 7 in registers. Groups must cover
// whole, power-of-two runs of lanes (G in 1, 2, 4, 8, 16, 32); other groupings take the
// general path, which needs topk <= 32: lane j keeps round j's winner (the task's manifest
// guarantees it).
extern "C" __global__ void __launch_bounds__(128)
    grouped_topk_e256(float* __restrict__ topk_weights, int* __restrict__ topk_ids,
                      const float* __restrict__ gating_output,
                      const float* __restrict__ e_score_correction_bias, int num_expert_group,
                      int topk_group, int renormalize, float routed_scaling_factor, int num_tokens,
                      int topk) {
  constexpr int kExperts = 256;
  constexpr int kPerLane = kExperts / kWarpSize;
  __shared__ float group_scores[kWarpsPerBlock][kMaxGroups];
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + warp;
  if (row >= num_tokens) return;  // uniform across the warp

  const bool lane_groups = num_expert_group >= 1 && num_expert_group <= kWarpSize &&
                           (num_expert_group & (num_expert_group - 1)) == 0;
  if (!lane_groups) {
    route_row_general(topk_weights, topk_ids, gating_output, e_score_correction_bias,
                      num_expert_group, topk_group, renormalize, routed_scaling_factor, row,
                      kExperts, topk, group_scores[warp]);
    return;
  }
  const int lanes_per_group = kWarpSize / num_expert_group;

  const float4* x =
      reinterpret_cast<const float4*>(gating_output + static_cast<size_t>(row) * kExperts) +
      2 * lane;
  const float4* b = reinterpret_cast<const float4*>(e_score_correction_bias) + 2 * lane;
  const float4 x0 = x[0], x1 = x[1], b0 = b[0], b1 = b[1];
  const float logits[kPerLane] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
  const float biases[kPerLane] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
  float score[kPerLane];
  float choice[kPerLane];
  float first = negative_infinity();
  float second = negative_infinity();
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    score[i] = sigmoid(logits[i]);
    choice[i] = score[i] + biases[i];
    insert_top2(choice[i], first, second);
  }
  for (int offset = 1; offset < lanes_per_group; offset *= 2) merge_top2(first, second, offset);
  const float my_group_score = first + second;

  // Rank of this lane's group among all groups: the number of groups that beat it.
  const int my_group = lane / lanes_per_group;
  int rank = 0;
  for (int q = 0; q < num_expert_group; ++q) {
    const float other = __shfl_sync(0xffffffffu, my_group_score, q * lanes_per_group);
    rank += (other > my_group_score || (other == my_group_score && q < my_group)) ? 1 : 0;
  }
  if (rank >= topk_group) {
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) choice[i] = negative_infinity();
  }

  // Round j: every lane's best remaining expert (ties: its lower index), then the warp's best
  // key and, among the lanes holding it, the lowest expert index, by two warp reductions
  // (redux.sync); the owner retires the winner and remembers its round.
  int won_round[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) won_round[i] = -1;
  float won_sum = 0.0f;  // this lane's winners' scores
  for (int j = 0; j < topk; ++j) {
    float best = choice[0];
    int best_i = 0;
#pragma unroll
    for (int i = 1; i < kPerLane; ++i) {
      if (choice[i] > best) {
        best = choice[i];
        best_i = i;
      }
    }
    const unsigned key = order_key(best);
    const unsigned top = __reduce_max_sync(0xffffffffu, key);
    const unsigned expert = __reduce_min_sync(
        0xffffffffu, key == top ? static_cast<unsigned>(kPerLane * lane + best_i) : 0xffffffffu);
    if (expert / kPerLane == static_cast<unsigned>(lane)) {
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        if (i == best_i) {
          choice[i] = negative_infinity();
          won_round[i] = j;
          won_sum += score[i];
        }
      }
    }
  }
  // Each owner writes its winners: weight = score (/ the winners' sum) * routed_scaling_factor.
  const float sum = warp_sum(won_sum);
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    if (won_round[i] >= 0) {
      const size_t index = static_cast<size_t>(row) * topk + won_round[i];
      const float weight = renormalize != 0 ? score[i] / sum : score[i];
      topk_weights[index] = weight * routed_scaling_factor;
      topk_ids[index] = kPerLane * lane + i;
    }
  }
}

// Any other expert count (GLM-4.5's 160, ...): the general path.
extern "C" __global__ void __launch_bounds__(128)
    grouped_topk_any(float* __restrict__ topk_weights, int* __restrict__ topk_ids,
                     const float* __restrict__ gating_output,
                     const float* __restrict__ e_score_correction_bias, int num_expert_group,
                     int topk_group, int renormalize, float routed_scaling_factor, int num_tokens,
                     int num_experts, int topk) {
  __shared__ float group_scores[kWarpsPerBlock][kMaxGroups];
  const int warp = threadIdx.x / kWarpSize;
  const int row = blockIdx.x * kWarpsPerBlock + warp;
  if (row >= num_tokens) return;  // uniform across the warp
  route_row_general(topk_weights, topk_ids, gating_output, e_score_correction_bias,
                    num_expert_group, topk_group, renormalize, routed_scaling_factor, row,
                    num_experts, topk, group_scores[warp]);
}
