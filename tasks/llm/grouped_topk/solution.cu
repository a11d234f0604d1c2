// A correct, deliberately simple solution for llm/grouped_topk: one thread per token following
// vLLM's steps literally (sigmoid, bias, top-2 group sums, top groups, top experts, weights).
//
// Slower than the reference (one thread walks the row several times per chosen expert), but
// right on every configuration the task allows (up to 64 groups, topk up to 32). Exact ties go
// to the lower group and expert index.
//
// @launch grouped_topk_simple<<<cdiv(num_tokens, 128), 128>>>(topk_weights, topk_ids, gating_output, e_score_correction_bias, num_expert_group, topk_group, renormalize, routed_scaling_factor, num_tokens, num_experts, topk)

__device__ float choice_score(const float* x, const float* bias, int e) {
  return 1.0f / (1.0f + expf(-x[e])) + bias[e];
}

extern "C" __global__ void grouped_topk_simple(float* topk_weights, int* topk_ids,
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

  // Group score: the two largest choice scores of the group, summed.
  float group_score[64];
  for (int q = 0; q < num_expert_group; ++q) {
    float first = -3.0e38f, second = -3.0e38f;
    for (int e = q * group_size; e < (q + 1) * group_size; ++e) {
      const float c = choice_score(x, bias, e);
      if (c > first) {
        second = first;
        first = c;
      } else if (c > second) {
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
