// expect: incorrect
// task: science/gaussian_projection
// Trick: frustum culling by the Gaussian's centre alone: a Gaussian whose projected centre lies
// outside the image is culled (radii 0, nothing else written) without forming its radius box,
// and the box test against the image's edges is dropped. That is the test a point renderer uses;
// it keeps every Gaussian whose centre is on screen exactly as gsplat does, culls more of the
// others (fewer outputs to write), and looks right on a render where splats at the border are a
// few pixels wide.
// Caught: gsplat keeps a Gaussian while its box (centre +- radii) overlaps the image, so a
// Gaussian centred just outside an edge with a radius reaching in is kept by the reference and
// culled here. On the visible case garden_1m_1cam about 2 % of the Gaussians are such (the
// median radius is 13 px), far from any culling boundary, and the checker fails them as
// "culled, but the reference keeps it"; every case has them.
// clang-format off
// @launch project_cull_by_centre<<<cdiv(num_gaussians, 256), 256>>>(radii, means2d, depths, conics, means, quats, scales, viewmats, Ks, width, height, eps2d, near_plane, far_plane, num_cameras, num_gaussians)
// clang-format on

extern "C" __global__ void project_cull_by_centre(int* radii, float* means2d, float* depths,
                                                  float* conics, const float* means,
                                                  const float* quats, const float* scales,
                                                  const float* viewmats, const float* Ks, int width,
                                                  int height, float eps2d, float near_plane,
                                                  float far_plane, int num_cameras,
                                                  int num_gaussians) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= num_gaussians) return;
  const float mx = means[3LL * n], my = means[3LL * n + 1], mz = means[3LL * n + 2];
  const float s[3] = {scales[3LL * n], scales[3LL * n + 1], scales[3LL * n + 2]};
  const float4 q = reinterpret_cast<const float4*>(quats)[n];
  const float inv = rsqrtf(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w);
  const float w = q.x * inv, x = q.y * inv, y = q.z * inv, z = q.w * inv;
  const float r[3][3] = {
      {1.0f - 2.0f * (y * y + z * z), 2.0f * (x * y - w * z), 2.0f * (x * z + w * y)},
      {2.0f * (x * y + w * z), 1.0f - 2.0f * (x * x + z * z), 2.0f * (y * z - w * x)},
      {2.0f * (x * z - w * y), 2.0f * (y * z + w * x), 1.0f - 2.0f * (x * x + y * y)},
  };
  for (int c = 0; c < num_cameras; ++c) {
    const float* v = viewmats + 16 * c;
    const float* k = Ks + 9 * c;
    const long long at = static_cast<long long>(c) * num_gaussians + n;
    const float px = v[0] * mx + v[1] * my + v[2] * mz + v[3];
    const float py = v[4] * mx + v[5] * my + v[6] * mz + v[7];
    const float pz = v[8] * mx + v[9] * my + v[10] * mz + v[11];
    const float fx = k[0], cx = k[2], fy = k[4], cy = k[5];
    const float rz = 1.0f / pz;
    const float u = fx * px * rz + cx, vv = fy * py * rz + cy;
    // The shortcut: the centre must be on the image.
    if (pz < near_plane || pz > far_plane || u < 0.0f || u >= width || vv < 0.0f || vv >= height) {
      radii[at * 2] = 0;
      radii[at * 2 + 1] = 0;
      continue;
    }
    const float lim_x_pos = (width - cx) / fx + 0.15f * width / fx;
    const float lim_x_neg = cx / fx + 0.15f * width / fx;
    const float lim_y_pos = (height - cy) / fy + 0.15f * height / fy;
    const float lim_y_neg = cy / fy + 0.15f * height / fy;
    const float tx = fminf(lim_x_pos, fmaxf(-lim_x_neg, px * rz));
    const float ty = fminf(lim_y_pos, fmaxf(-lim_y_neg, py * rz));
    float t[2][3];  // J W
    for (int j = 0; j < 3; ++j) {
      t[0][j] = fx * rz * (v[j] - tx * v[8 + j]);
      t[1][j] = fy * rz * (v[4 + j] - ty * v[8 + j]);
    }
    // T = (J W) R S, column j of R S is s[j] * R[:, j].
    float tm[2][3];
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 3; ++j) {
        tm[i][j] = (t[i][0] * r[0][j] + t[i][1] * r[1][j] + t[i][2] * r[2][j]) * s[j];
      }
    }
    const float a = tm[0][0] * tm[0][0] + tm[0][1] * tm[0][1] + tm[0][2] * tm[0][2] + eps2d;
    const float b = tm[0][0] * tm[1][0] + tm[0][1] * tm[1][1] + tm[0][2] * tm[1][2];
    const float d = tm[1][0] * tm[1][0] + tm[1][1] * tm[1][1] + tm[1][2] * tm[1][2] + eps2d;
    const float inv_det = 1.0f / (a * d - b * b);
    radii[at * 2] = static_cast<int>(ceilf(3.33f * sqrtf(a)));
    radii[at * 2 + 1] = static_cast<int>(ceilf(3.33f * sqrtf(d)));
    means2d[at * 2] = u;
    means2d[at * 2 + 1] = vv;
    depths[at] = pz;
    conics[at * 3] = d * inv_det;
    conics[at * 3 + 1] = -b * inv_det;
    conics[at * 3 + 2] = a * inv_det;
  }
}
