// expect: incorrect
// task: llm/moe_align_block_size
// Trick: sizes the expert table for 256 experts, DeepSeek-V3's router and the largest of every
// visible case: each of the block's 256 threads owns one expert's counter, so the padded layout
// is one 256-wide block scan instead of a serial walk over the experts, and the per-expert
// arrays fit in 2 KiB of shared memory. Ids past the table are dropped, the way vLLM skips ids
// outside [0, num_experts). Every visible case and every hidden case before the two below routes
// over at most 256 experts, where this is exact.
// Caught: the hidden cases h_qwen3_next_512_experts (Qwen3-Next: 512 experts, top-10, 640 ids)
// and h_kimi_k2_384_experts (384 experts, top-8, 8000 ids: the reference's large path): about
// half and a third of their ids route to experts 256 and up, whose tokens never reach
// sorted_token_ids, so the padded total, num_tokens_post_pad and every later block's expert are
// wrong.
//
// @launch moe_align_256<<<1, 256>>>(topk_ids, sorted_token_ids, experts_ids,
//   num_tokens_post_pad, num_tokens, topk, num_experts, block_size, max_num_tokens_padded,
//   max_num_m_blocks)

constexpr int kExperts = 256;  // one expert per thread; must equal the block size

extern "C" __global__ void moe_align_256(const int* topk_ids, int* sorted_token_ids,
                                         int* experts_ids, int* num_tokens_post_pad,
                                         int num_tokens, int topk, int num_experts,
                                         int block_size, int max_num_tokens_padded,
                                         int max_num_m_blocks) {
  __shared__ int counts[kExperts];
  __shared__ int scan[kExperts];
  const int numel = num_tokens * topk;
  const int e = threadIdx.x;
  counts[e] = 0;
  for (int p = threadIdx.x; p < max_num_tokens_padded; p += kExperts) {
    sorted_token_ids[p] = numel;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < numel; i += kExperts) {
    const int id = topk_ids[i];
    if (id >= 0 && id < kExperts) atomicAdd(&counts[id], 1);
  }
  __syncthreads();

  // Inclusive scan of the padded counts, one expert per thread.
  const int padded =
      e < num_experts ? (counts[e] + block_size - 1) / block_size * block_size : 0;
  scan[e] = padded;
  __syncthreads();
  for (int stride = 1; stride < kExperts; stride *= 2) {
    const int add = e >= stride ? scan[e - stride] : 0;
    __syncthreads();
    scan[e] += add;
    __syncthreads();
  }
  const int offset = scan[e] - padded;
  const int total = scan[kExperts - 1];
  for (int b = offset / block_size; b < (offset + padded) / block_size; ++b) experts_ids[b] = e;
  for (int b = total / block_size + threadIdx.x; b < max_num_m_blocks; b += kExperts) {
    experts_ids[b] = 0;
  }
  if (e == 0) *num_tokens_post_pad = total;

  // Reuse the counters as cursors: the next free slot of each segment.
  counts[e] = offset;
  __syncthreads();
  for (int i = threadIdx.x; i < numel; i += kExperts) {
    const int id = topk_ids[i];
    if (id >= 0 && id < kExperts) sorted_token_ids[atomicAdd(&counts[id], 1)] = i;
  }
}
