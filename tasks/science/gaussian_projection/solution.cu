// A correct, deliberately simple solution for science/gaussian_projection: one thread per camera
// and Gaussian, the 3x3 covariance formed explicitly (R S S^T R^T, then W Sigma W^T, then
// J Sigma_c J^T) as gsplat writes it.
//
// Slower than the reference (a Gaussian's inputs read once per camera, ~3x the arithmetic), but
// right on every shape. Culled Gaussians get radii (0, 0) and nothing else written.
//
// clang-format off
// @launch project_simple<<<cdiv(num_cameras * num_gaussians, 256), 256>>>(radii, means2d, depths, conics, means, quats, scales, viewmats, Ks, width, height, eps2d, near_plane, far_plane, num_cameras, num_gaussians)
// clang-format on

extern "C" __global__ void project_simple(int* radii, float* means2d, float* depths, float* conics,
                                          const float* means, const float* quats,
                                          const float* scales, const float* viewmats,
                                          const float* Ks, int width, int height, float eps2d,
                                          float near_plane, float far_plane, int num_cameras,
                                          int num_gaussians) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(num_cameras) * num_gaussians) return;
  const int c = static_cast<int>(idx / num_gaussians);
  const long long n = idx % num_gaussians;
  const float* view = viewmats + c * 16;
  const float* k = Ks + c * 9;

  float p[3];
  for (int i = 0; i < 3; ++i) {
    p[i] = view[i * 4 + 3];
    for (int j = 0; j < 3; ++j) p[i] += view[i * 4 + j] * means[n * 3 + j];
  }
  if (p[2] < near_plane || p[2] > far_plane) {
    radii[idx * 2] = 0;
    radii[idx * 2 + 1] = 0;
    return;
  }

  const float* q = quats + n * 4;
  const float inv = 1.0f / sqrtf(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  const float w = q[0] * inv, x = q[1] * inv, y = q[2] * inv, z = q[3] * inv;
  const float r[3][3] = {
      {1.0f - 2.0f * (y * y + z * z), 2.0f * (x * y - w * z), 2.0f * (x * z + w * y)},
      {2.0f * (x * y + w * z), 1.0f - 2.0f * (x * x + z * z), 2.0f * (y * z - w * x)},
      {2.0f * (x * z - w * y), 2.0f * (y * z + w * x), 1.0f - 2.0f * (x * x + y * y)},
  };
  float sigma[3][3];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      sigma[i][j] = 0.0f;
      for (int l = 0; l < 3; ++l) {
        const float s = scales[n * 3 + l];
        sigma[i][j] += r[i][l] * s * s * r[j][l];
      }
    }
  }
  float sigma_c[3][3];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      sigma_c[i][j] = 0.0f;
      for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b)
          sigma_c[i][j] += view[i * 4 + a] * sigma[a][b] * view[j * 4 + b];
      }
    }
  }

  const float fx = k[0], cx = k[2], fy = k[4], cy = k[5];
  const float tan_fovx = 0.5f * width / fx, tan_fovy = 0.5f * height / fy;
  const float lim_x_pos = (width - cx) / fx + 0.3f * tan_fovx;
  const float lim_x_neg = cx / fx + 0.3f * tan_fovx;
  const float lim_y_pos = (height - cy) / fy + 0.3f * tan_fovy;
  const float lim_y_neg = cy / fy + 0.3f * tan_fovy;
  const float rz = 1.0f / p[2];
  const float tx = p[2] * fminf(lim_x_pos, fmaxf(-lim_x_neg, p[0] * rz));
  const float ty = p[2] * fminf(lim_y_pos, fmaxf(-lim_y_neg, p[1] * rz));
  const float jac[2][3] = {{fx * rz, 0.0f, -fx * tx * rz * rz},
                           {0.0f, fy * rz, -fy * ty * rz * rz}};
  float cov[2][2];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) {
      cov[i][j] = 0.0f;
      for (int a = 0; a < 3; ++a) {
        for (int b = 0; b < 3; ++b) cov[i][j] += jac[i][a] * sigma_c[a][b] * jac[j][b];
      }
    }
  }
  cov[0][0] += eps2d;
  cov[1][1] += eps2d;
  const float det = cov[0][0] * cov[1][1] - cov[0][1] * cov[1][0];
  if (det <= 0.0f) {
    radii[idx * 2] = 0;
    radii[idx * 2 + 1] = 0;
    return;
  }
  const float radius_x = ceilf(3.33f * sqrtf(cov[0][0]));
  const float radius_y = ceilf(3.33f * sqrtf(cov[1][1]));
  const float u = fx * p[0] * rz + cx, v = fy * p[1] * rz + cy;
  if (u + radius_x <= 0.0f || u - radius_x >= width || v + radius_y <= 0.0f ||
      v - radius_y >= height) {
    radii[idx * 2] = 0;
    radii[idx * 2 + 1] = 0;
    return;
  }
  radii[idx * 2] = static_cast<int>(radius_x);
  radii[idx * 2 + 1] = static_cast<int>(radius_y);
  means2d[idx * 2] = u;
  means2d[idx * 2 + 1] = v;
  depths[idx] = p[2];
  conics[idx * 3] = cov[1][1] / det;
  conics[idx * 3 + 1] = -cov[0][1] / det;
  conics[idx * 3 + 2] = cov[0][0] / det;
}
