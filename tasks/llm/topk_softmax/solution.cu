// A correct, deliberately simple solution for llm/topk_softmax: one thread per token, scalar
// loads, the exact fp32 softmax, and k linear scans for the k largest probabilities.
//
// Slower than the reference (one thread walks the whole row k + 2 times), but right on every
// shape: round j takes the largest probability strictly after round j - 1's winner in the
// order (probability descending, index ascending), so exact ties go to the lower index.
//
// @launch topk_softmax_simple<<<cdiv(num_tokens, 128), 128>>>(topk_weights, topk_indices, token_expert_indices, gating_output, num_tokens, num_experts, topk)

extern "C" __global__ void topk_softmax_simple(float* topk_weights, int* topk_indices,
                                               int* token_expert_indices,
                                               const float* gating_output, int num_tokens,
                                               int num_experts, int topk) {
  const int token = blockIdx.x * blockDim.x + threadIdx.x;
  if (token >= num_tokens) return;
  const float* x = gating_output + static_cast<size_t>(token) * num_experts;

  float row_max = x[0];
  for (int e = 1; e < num_experts; ++e) row_max = fmaxf(row_max, x[e]);
  float sum = 0.0f;
  for (int e = 0; e < num_experts; ++e) sum += expf(x[e] - row_max);

  float previous = 2.0f;  // above every probability
  int previous_expert = -1;
  for (int j = 0; j < topk; ++j) {
    float best = -1.0f;
    int best_expert = -1;
    for (int e = 0; e < num_experts; ++e) {
      const float p = expf(x[e] - row_max) / sum;
      const bool after_previous = p < previous || (p == previous && e > previous_expert);
      if (after_previous && p > best) {
        best = p;
        best_expert = e;
      }
    }
    const size_t index = static_cast<size_t>(token) * topk + j;
    topk_weights[index] = best;
    topk_indices[index] = best_expert;
    token_expert_indices[index] = j * num_tokens + token;
    previous = best;
    previous_expert = best_expert;
  }
}
