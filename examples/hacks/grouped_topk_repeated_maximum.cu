// expect: incorrect
// task: llm/grouped_topk
// Trick: finds a group's two best experts in one pass that keeps only distinct values (the
// second is the largest score below the first), the natural shortcut of a warp max-reduction
// that masks the winner's value instead of the winner's lane. It differs from the op only where
// a group's two best choice scores are exactly equal: with random logits and biases only by a
// one-in-a-million fp32 coincidence, and
// harmlessly in the all-tied case (every group scores alike either way), so every visible case
// and every earlier hidden case is routed exactly as by the reference.
// Caught: the hidden case h_repeated_group_maximum: groups whose two best experts are equal
// (two logits of 3.0, zero bias) score 2 sigmoid(3) = 1.905 and must be kept, but counting the
// maximum once scores them 0.970, below the groups with two distinct high experts; the chosen
// experts lie in groups no valid selection keeps, on every row.
//
// clang-format off
// @launch grouped_topk_distinct<<<cdiv(num_tokens, 128), 128>>>(topk_weights, topk_ids, gating_output, e_score_correction_bias, num_expert_group, topk_group, renormalize, routed_scaling_factor, num_tokens, num_experts, topk)
// clang-format on

__device__ float choice_score(const float* x, const float* bias, int e) {
  return 1.0f / (1.0f + expf(-x[e])) + bias[e];
}

extern "C" __global__ void grouped_topk_distinct(float* topk_weights, int* topk_ids,
                                                 const float* gating_output,
                                                 const float* e_score_correction_bias,
                                                 int num_expert_group, int topk_group,
                                                 int renormalize, float routed_scaling_factor,
                                                 int num_tokens, int num_experts, int topk) {
  const int token = blockIdx.x * blockDim.x + threadIdx.x;
  if (token >= num_tokens) return;
  const float* x = gating_output + static_cast<size_t>(token) * num_experts;
  const float* bias = e_score_correction_bias;
  const int group_size = num_experts / num_expert_group;

  // Group score: the largest choice score plus the largest one below it.
  float group_score[64];
  for (int q = 0; q < num_expert_group; ++q) {
    float first = -3.0e38f, second = -3.0e38f;
    for (int e = q * group_size; e < (q + 1) * group_size; ++e) {
      const float c = choice_score(x, bias, e);
      if (c > first) {
        second = first;
        first = c;
      } else if (c > second && c < first) {  // a repeat of the maximum is not a second
        second = c;
      }
    }
    group_score[q] = first + second;
  }
  // Keep a group when fewer than topk_group groups beat it.
  bool kept[64];
  for (int q = 0; q < num_expert_group; ++q) {
    int rank = 0;
    for (int other = 0; other < num_expert_group; ++other) {
      if (group_score[other] > group_score[q] ||
          (group_score[other] == group_score[q] && other < q)) {
        ++rank;
      }
    }
    kept[q] = rank < topk_group;
  }

  // Chosen experts in descending choice order; remember their sigmoid scores.
  float score[32];
  int chosen[32];
  float previous = 3.0e38f;
  int previous_expert = -1;
  float sum = 0.0f;
  for (int j = 0; j < topk; ++j) {
    float best = -3.0e38f;
    int best_expert = -1;
    for (int e = 0; e < num_experts; ++e) {
      if (!kept[e / group_size]) continue;
      const float c = choice_score(x, bias, e);
      const bool after_previous = c < previous || (c == previous && e > previous_expert);
      if (after_previous && c > best) {
        best = c;
        best_expert = e;
      }
    }
    chosen[j] = best_expert;
    score[j] = 1.0f / (1.0f + expf(-x[best_expert]));
    sum += score[j];
    previous = best;
    previous_expert = best_expert;
  }
  for (int j = 0; j < topk; ++j) {
    const size_t index = static_cast<size_t>(token) * topk + j;
    const float weight = renormalize != 0 ? score[j] / sum : score[j];
    topk_weights[index] = weight * routed_scaling_factor;
    topk_ids[index] = chosen[j];
  }
}
