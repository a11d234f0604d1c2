// Example solution for science/knn: a thread per query scans the cloud k times, each time taking
// the nearest point after the previous one in (distance, index) order.
//
// @launch knn_select<<<dim3(cdiv(num_query, 64), batch), 64>>>(dists, idx, query, ref, num_query,
//   num_ref, k)

extern "C" __global__ void knn_select(float* dists, long long* idx, const float* query,
                                      const float* ref, int num_query, int num_ref, int k) {
  const int q = blockIdx.x * blockDim.x + threadIdx.x;
  const long long b = blockIdx.y;
  if (q >= num_query) return;
  const float* p = query + (b * num_query + q) * 3;
  const float* cloud = ref + b * num_ref * 3;
  float last_d = -1.0f;
  int last_i = -1;
  for (int j = 0; j < k; ++j) {
    float best_d = 3.0e38f;
    int best_i = -1;
    for (int r = 0; r < num_ref; ++r) {
      const float dx = p[0] - cloud[r * 3], dy = p[1] - cloud[r * 3 + 1],
                  dz = p[2] - cloud[r * 3 + 2];
      const float d = dx * dx + dy * dy + dz * dz;
      const bool after = d > last_d || (d == last_d && r > last_i);
      if (after && (d < best_d || (d == best_d && r < best_i))) {
        best_d = d;
        best_i = r;
      }
    }
    dists[(b * num_query + q) * k + j] = best_d;
    idx[(b * num_query + q) * k + j] = best_i;
    last_d = best_d;
    last_i = best_i;
  }
}
