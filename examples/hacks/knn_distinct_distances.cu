// expect: incorrect
// task: science/knn
// Trick: selects the k neighbours by k scans that each take the nearest point strictly farther
// than the previous pick, comparing distances only: one float compare per candidate instead of
// the (distance, index) order that steps through equal distances, and no index bookkeeping.
// Points that tie exactly with an earlier pick are skipped. On clouds sampled from surfaces two
// reference points at bit-identical fp32 distance from a query are a coincidence of the last
// bits, so the picks are those of a correct kernel on the visible cases and on every hidden
// case but one.
// Caught: the hidden case h_repeated_points (both clouds cycle through the 4 corners of a unit
// square, 256 copies each): from a corner the distances are 0 (256 points), 1 (512) and 2
// (256), so after three picks no point is strictly farther and the remaining 13 of the 16
// slots get index -1 and distance 3e38; the checker rejects them (indices out of range and
// repeated, closer points left out) on every query.
// clang-format off
// @launch knn_distinct<<<dim3(cdiv(num_query, 64), batch), 64>>>(dists, idx, query, ref, num_query, num_ref, k)
// clang-format on

extern "C" __global__ void knn_distinct(float* dists, long long* idx, const float* query,
                                        const float* ref, int num_query, int num_ref, int k) {
  const int q = blockIdx.x * blockDim.x + threadIdx.x;
  const long long b = blockIdx.y;
  if (q >= num_query) return;
  const float* p = query + (b * num_query + q) * 3;
  const float* cloud = ref + b * num_ref * 3;
  float last_d = -1.0f;
  for (int j = 0; j < k; ++j) {
    float best_d = 3.0e38f;
    int best_i = -1;
    for (int r = 0; r < num_ref; ++r) {
      const float dx = p[0] - cloud[r * 3], dy = p[1] - cloud[r * 3 + 1],
                  dz = p[2] - cloud[r * 3 + 2];
      const float d = dx * dx + dy * dy + dz * dz;
      if (d > last_d && d < best_d) {  // strictly past the previous pick: ties are skipped
        best_d = d;
        best_i = r;
      }
    }
    dists[(b * num_query + q) * k + j] = best_d;
    idx[(b * num_query + q) * k + j] = best_i;
    last_d = best_d;
  }
}
