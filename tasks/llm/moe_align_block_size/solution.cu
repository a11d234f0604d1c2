// A correct, deliberately simple solution for llm/moe_align_block_size: one block of 256
// threads. Plain shared-memory atomics count the experts, thread 0 walks the experts to lay out
// the padded segments, every position is pre-filled with the padding value, and a second pass of
// atomics hands each index its slot in its expert's segment.
//
// Slower than the reference (a serial prefix sum over the experts, one atomic per index on the
// hot experts' counters, one block for every size), but right on every shape: the slot order
// inside a segment is whatever the atomics give, which the task allows.
//
// @launch moe_align_simple<<<1, 256>>>(topk_ids, sorted_token_ids, experts_ids,
//   num_tokens_post_pad, num_tokens, topk, num_experts, block_size, max_num_tokens_padded,
//   max_num_m_blocks)

extern "C" __global__ void moe_align_simple(const int* topk_ids, int* sorted_token_ids,
                                            int* experts_ids, int* num_tokens_post_pad,
                                            int num_tokens, int topk, int num_experts,
                                            int block_size, int max_num_tokens_padded,
                                            int max_num_m_blocks) {
  __shared__ int counts[1024];
  __shared__ int offsets[1025];
  const int numel = num_tokens * topk;
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = 0;
  for (int p = threadIdx.x; p < max_num_tokens_padded; p += blockDim.x) {
    sorted_token_ids[p] = numel;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < numel; i += blockDim.x) atomicAdd(&counts[topk_ids[i]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int total = 0;
    for (int e = 0; e < num_experts; ++e) {
      offsets[e] = total;
      const int padded = (counts[e] + block_size - 1) / block_size * block_size;
      for (int b = total / block_size; b < (total + padded) / block_size; ++b) experts_ids[b] = e;
      total += padded;
    }
    offsets[num_experts] = total;
    for (int b = total / block_size; b < max_num_m_blocks; ++b) experts_ids[b] = 0;
    *num_tokens_post_pad = total;
  }
  __syncthreads();
  // Reuse the counters as cursors: the next free slot of each segment.
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) counts[e] = offsets[e];
  __syncthreads();
  for (int i = threadIdx.x; i < numel; i += blockDim.x) {
    sorted_token_ids[atomicAdd(&counts[topk_ids[i]], 1)] = i;
  }
}
