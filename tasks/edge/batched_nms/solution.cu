// Example solution for edge/batched_nms: one block. Every box counts the boxes ahead of it
// (higher score, or equal score and lower index) to find its place in the visiting order; then
// the block walks that order one box at a time, and each kept box has all threads mark the
// later boxes of its group it overlaps.
//
// @workspace order i32[num_boxes]
// @workspace removed u8[num_boxes]
// @launch nms_one_block<<<1, 1024>>>(keep, num_kept, boxes, scores, idxs, iou_threshold, order,
//   removed, num_boxes)

extern "C" __global__ void nms_one_block(long long* keep, int* num_kept, const float* boxes,
                                         const float* scores, const long long* idxs,
                                         float iou_threshold, int* order, unsigned char* removed,
                                         int num_boxes) {
  for (int i = threadIdx.x; i < num_boxes; i += blockDim.x) {
    int ahead = 0;
    for (int j = 0; j < num_boxes; ++j) {
      ahead += scores[j] > scores[i] || (scores[j] == scores[i] && j < i) ? 1 : 0;
    }
    order[ahead] = i;
    removed[i] = 0;
  }
  __syncthreads();
  int count = 0;
  for (int r = 0; r < num_boxes; ++r) {
    const int i = order[r];
    if (removed[i]) continue;  // the same value in every thread: the loop stays uniform
    if (threadIdx.x == 0) keep[count] = i;
    ++count;
    const float* a = boxes + 4 * i;
    const float area_a = (a[2] - a[0]) * (a[3] - a[1]);
    for (int s = r + 1 + threadIdx.x; s < num_boxes; s += blockDim.x) {
      const int j = order[s];
      if (idxs[j] != idxs[i]) continue;
      const float* b = boxes + 4 * j;
      const float w = fmaxf(fminf(a[2], b[2]) - fmaxf(a[0], b[0]), 0.0f);
      const float h = fmaxf(fminf(a[3], b[3]) - fmaxf(a[1], b[1]), 0.0f);
      const float inter = w * h;
      const float area_b = (b[2] - b[0]) * (b[3] - b[1]);
      if (inter / (area_a + area_b - inter) > iou_threshold) removed[j] = 1;
    }
    __syncthreads();
  }
  for (int p = count + threadIdx.x; p < num_boxes; p += blockDim.x) keep[p] = -1;
  if (threadIdx.x == 0) num_kept[0] = count;
}
