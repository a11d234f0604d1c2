// Reference for science/gaussian_projection: 3D Gaussian splatting's projection forward as gsplat
// 1.5's fully_fused_projection computes it (pinhole, per-axis radii), fp32:
//
//   M = R(q / |q|) diag(scales)            (the 3-D covariance is M M^T)
//   p = W mean + t,  T = J W M             (J the EWA Jacobian at p, x/z and y/z clamped to the
//                                           frustum widened by 15 % of the image on each side)
//   cov2d = T T^T + eps2d I = (a, b; b, c),  conic = (c, -b, a) / (a c - b^2)
//   radii = (ceil(3.33 sqrt(a)), ceil(3.33 sqrt(c))),  means2d = (fx x/z + cx, fy y/z + cy)
//
// and (0, 0) radii for a Gaussian outside [near_plane, far_plane], with det <= 0, or whose
// radius box lies off the image (culled outputs are unspecified; this kernel writes zeros).
//
// Launch plan: a thread per Gaussian, 256 a block; each thread walks every camera.
//
// @launch gaussian_projection_kernel<<<cdiv(num_gaussians, 256), 256>>>(radii, means2d, depths,
//   conics, means, quats, scales, viewmats, Ks, width, height, eps2d, near_plane, far_plane,
//   num_cameras, num_gaussians)
//
// Design notes (why, for whoever optimises this next):
// - Memory bound: 40 bytes read a Gaussian and 32 bytes written a camera and Gaussian against
//   ~170 FLOPs (3 M Gaussians, one camera: 216 MB, ~50 us at the H200's ~4.3 TB/s achievable,
//   versus ~10 us of fp32 work). Everything is arranged around moving those bytes once.
// - Camera loop inside the thread (gsplat runs a thread per camera and Gaussian): a Gaussian's
//   40 bytes are read once whatever the camera count, and R(q) diag(s) is formed once.
// - The covariance is never formed: T = (J W) (R S) is 2 x 3 and cov2d = T T^T, 30 + 9 FMAs
//   instead of the 3 x 3 products of R S S^T R^T and W Sigma W^T (~100); a, c >= eps2d by
//   construction (sums of squares), and T T^T stays positive semi-definite up to rounding.
// - 12-byte records (means, scales) are three 4-byte loads through L1: a warp's three loads
//   cover the same 384 contiguous bytes, so DRAM sees each sector once. quats are one float4.
// - Every output element is written, zeros where culled: full 32-byte sectors, no partial-sector
//   merges in L2 (skipping culled elements saves little: culling is scattered over the indices).
// - Camera parameters are warp-uniform loads (one broadcast transaction each, a viewmat row as
//   one float4); the frustum limits are recomputed per camera from one reciprocal per focal
//   length (gsplat divides three times per axis), a few instructions against the memory budget.

namespace {

constexpr int kThreads = 256;

}  // namespace

extern "C" __global__ void __launch_bounds__(kThreads)
    gaussian_projection_kernel(int* __restrict__ radii, float* __restrict__ means2d,
                               float* __restrict__ depths, float* __restrict__ conics,
                               const float* __restrict__ means, const float* __restrict__ quats,
                               const float* __restrict__ scales, const float* __restrict__ viewmats,
                               const float* __restrict__ Ks, int width, int height, float eps2d,
                               float near_plane, float far_plane, int num_cameras,
                               int num_gaussians) {
  const int n = blockIdx.x * kThreads + threadIdx.x;
  if (n >= num_gaussians) return;

  const long long n3 = 3LL * n;
  const float mx = __ldg(means + n3), my = __ldg(means + n3 + 1), mz = __ldg(means + n3 + 2);
  const float sx = __ldg(scales + n3), sy = __ldg(scales + n3 + 1), sz = __ldg(scales + n3 + 2);
  const float4 q = __ldg(reinterpret_cast<const float4*>(quats) + n);

  // R(q) diag(s), q = (w, x, y, z) normalised.
  const float inv_norm = rsqrtf(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w);
  const float w = q.x * inv_norm, x = q.y * inv_norm, y = q.z * inv_norm, z = q.w * inv_norm;
  const float x2 = x * x, y2 = y * y, z2 = z * z;
  const float xy = x * y, xz = x * z, yz = y * z;
  const float wx = w * x, wy = w * y, wz = w * z;
  float m[3][3];
  m[0][0] = (1.0f - 2.0f * (y2 + z2)) * sx;
  m[0][1] = 2.0f * (xy - wz) * sy;
  m[0][2] = 2.0f * (xz + wy) * sz;
  m[1][0] = 2.0f * (xy + wz) * sx;
  m[1][1] = (1.0f - 2.0f * (x2 + z2)) * sy;
  m[1][2] = 2.0f * (yz - wx) * sz;
  m[2][0] = 2.0f * (xz - wy) * sx;
  m[2][1] = 2.0f * (yz + wx) * sy;
  m[2][2] = (1.0f - 2.0f * (x2 + y2)) * sz;

  const float fwidth = static_cast<float>(width), fheight = static_cast<float>(height);
  for (int c = 0; c < num_cameras; ++c) {
    const float* view = viewmats + 16 * c;
    const float* k = Ks + 9 * c;
    const long long at = static_cast<long long>(c) * num_gaussians + n;
    float wr[3][3], t[3];
#pragma unroll
    for (int i = 0; i < 3; ++i) {
      const float4 row = __ldg(reinterpret_cast<const float4*>(view) + i);  // 64-byte matrices
      wr[i][0] = row.x, wr[i][1] = row.y, wr[i][2] = row.z, t[i] = row.w;
    }
    const float pc_x = wr[0][0] * mx + wr[0][1] * my + wr[0][2] * mz + t[0];
    const float pc_y = wr[1][0] * mx + wr[1][1] * my + wr[1][2] * mz + t[1];
    const float pc_z = wr[2][0] * mx + wr[2][1] * my + wr[2][2] * mz + t[2];
    const bool in_depth = !(pc_z < near_plane || pc_z > far_plane);

    const float fx = __ldg(k), cx = __ldg(k + 2), fy = __ldg(k + 4), cy = __ldg(k + 5);
    // The frustum limits: the image's edges widened by 15 % of its size on each side (gsplat's
    // 0.3 tan_fov), with one reciprocal per focal length; a limit only bounds the clamp below,
    // where an ulp of it moves J by an ulp.
    const float inv_fx = 1.0f / fx, inv_fy = 1.0f / fy;
    const float margin_x = 0.15f * fwidth * inv_fx, margin_y = 0.15f * fheight * inv_fy;
    const float lim_x_pos = (fwidth - cx) * inv_fx + margin_x;
    const float lim_x_neg = cx * inv_fx + margin_x;
    const float lim_y_pos = (fheight - cy) * inv_fy + margin_y;
    const float lim_y_neg = cy * inv_fy + margin_y;
    const float rz = 1.0f / pc_z;
    const float rz2 = rz * rz;
    const float tx = pc_z * fminf(lim_x_pos, fmaxf(-lim_x_neg, pc_x * rz));
    const float ty = pc_z * fminf(lim_y_pos, fmaxf(-lim_y_neg, pc_y * rz));
    // J = [[fx rz, 0, -fx tx rz^2], [0, fy rz, -fy ty rz^2]]; rows of J W.
    const float j00 = fx * rz, j02 = -fx * tx * rz2;
    const float j11 = fy * rz, j12 = -fy * ty * rz2;
    float jw[2][3];
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      jw[0][j] = j00 * wr[0][j] + j02 * wr[2][j];
      jw[1][j] = j11 * wr[1][j] + j12 * wr[2][j];
    }
    // T = (J W) (R S); cov2d = T T^T.
    float tm[2][3];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
      for (int j = 0; j < 3; ++j) {
        tm[i][j] = jw[i][0] * m[0][j] + jw[i][1] * m[1][j] + jw[i][2] * m[2][j];
      }
    }
    const float a = tm[0][0] * tm[0][0] + tm[0][1] * tm[0][1] + tm[0][2] * tm[0][2] + eps2d;
    const float b = tm[0][0] * tm[1][0] + tm[0][1] * tm[1][1] + tm[0][2] * tm[1][2];
    const float d = tm[1][0] * tm[1][0] + tm[1][1] * tm[1][1] + tm[1][2] * tm[1][2] + eps2d;
    const float det = a * d - b * b;
    const float radius_x = ceilf(3.33f * sqrtf(a));
    const float radius_y = ceilf(3.33f * sqrtf(d));
    const float u = fx * pc_x * rz + cx;
    const float v = fy * pc_y * rz + cy;
    const bool on_screen = !(u + radius_x <= 0.0f || u - radius_x >= fwidth ||
                             v + radius_y <= 0.0f || v - radius_y >= fheight);
    // Culled lanes store zeros in the same instructions: no divergent store paths.
    const bool keep = in_depth && !(det <= 0.0f) && on_screen;
    const float inv_det = 1.0f / det;
    reinterpret_cast<int2*>(radii)[at] =
        keep ? make_int2(static_cast<int>(radius_x), static_cast<int>(radius_y)) : make_int2(0, 0);
    reinterpret_cast<float2*>(means2d)[at] = keep ? make_float2(u, v) : make_float2(0.0f, 0.0f);
    depths[at] = keep ? pc_z : 0.0f;
    conics[at * 3] = keep ? d * inv_det : 0.0f;
    conics[at * 3 + 1] = keep ? -b * inv_det : 0.0f;
    conics[at * 3 + 2] = keep ? a * inv_det : 0.0f;
  }
}
