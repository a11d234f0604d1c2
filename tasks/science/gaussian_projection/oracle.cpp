// Oracle of science/gaussian_projection: gsplat's fully_fused_projection forward (pinhole, per-axis
// radii), in float64. Culled Gaussians get radii (0, 0) and zeros elsewhere (the task leaves those
// values unspecified; the checker does not read them).
#include "tasks/oracle.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "tasks/rotation.hpp"

namespace crucible::tasks {
namespace {

// The fp32 value a kernel receives for an f32 scalar, and gsplat's 3.33f.
double as_f32(double value) { return static_cast<double>(static_cast<float>(value)); }
constexpr double kExtend = static_cast<double>(3.33f);

core::Status gaussian_projection(const OracleCall& call) {
  const OracleTensor& means = call.tensor("means");
  const OracleTensor& quats = call.tensor("quats");
  const OracleTensor& scales = call.tensor("scales");
  const OracleTensor& viewmats = call.tensor("viewmats");
  const OracleTensor& ks = call.tensor("Ks");
  OracleTensor& radii = call.tensor("radii");
  OracleTensor& means2d = call.tensor("means2d");
  OracleTensor& depths = call.tensor("depths");
  OracleTensor& conics = call.tensor("conics");
  const std::int64_t cameras = call.symbol("num_cameras");
  const std::int64_t gaussians = call.symbol("num_gaussians");
  const double width = call.scalar("width");
  const double height = call.scalar("height");
  const double eps2d = as_f32(call.scalar("eps2d"));
  const double near_plane = as_f32(call.scalar("near_plane"));
  const double far_plane = as_f32(call.scalar("far_plane"));
  if (width <= 0 || height <= 0) {
    return core::Error{core::ErrorCode::kInvalidArgument,
                       "gaussian_projection: width and height must be positive"};
  }

  for (std::int64_t n = 0; n < gaussians; ++n) {
    // R(q) S, q normalised (wxyz).
    double m[3][3];
    tasks::rotation_times_scale(&quats.values[static_cast<std::size_t>(n * 4)],
                                &scales.values[static_cast<std::size_t>(n * 3)], m);
    double sigma[3][3];
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        sigma[i][j] = m[i][0] * m[j][0] + m[i][1] * m[j][1] + m[i][2] * m[j][2];
      }
    }
    const double* mean = &means.values[static_cast<std::size_t>(n * 3)];

    for (std::int64_t c = 0; c < cameras; ++c) {
      const double* view = &viewmats.values[static_cast<std::size_t>(c * 16)];
      const double* k = &ks.values[static_cast<std::size_t>(c * 9)];
      const std::size_t at = static_cast<std::size_t>(c * gaussians + n);
      double p[3];
      for (int i = 0; i < 3; ++i) {
        p[i] = view[i * 4] * mean[0] + view[i * 4 + 1] * mean[1] + view[i * 4 + 2] * mean[2] +
               view[i * 4 + 3];
      }
      if (p[2] < near_plane || p[2] > far_plane) continue;  // culled: outputs stay 0

      // Sigma_c = W Sigma W^T.
      double ws[3][3], sigma_c[3][3];
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
          ws[i][j] = view[i * 4] * sigma[0][j] + view[i * 4 + 1] * sigma[1][j] +
                     view[i * 4 + 2] * sigma[2][j];
        }
      }
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
          sigma_c[i][j] =
              ws[i][0] * view[j * 4] + ws[i][1] * view[j * 4 + 1] + ws[i][2] * view[j * 4 + 2];
        }
      }

      const double fx = k[0], fy = k[4], cx = k[2], cy = k[5];
      const double tan_fovx = 0.5 * width / fx, tan_fovy = 0.5 * height / fy;
      const double lim_x_pos = (width - cx) / fx + 0.3 * tan_fovx;
      const double lim_x_neg = cx / fx + 0.3 * tan_fovx;
      const double lim_y_pos = (height - cy) / fy + 0.3 * tan_fovy;
      const double lim_y_neg = cy / fy + 0.3 * tan_fovy;
      const double rz = 1.0 / p[2];
      const double tx = p[2] * std::fmin(lim_x_pos, std::fmax(-lim_x_neg, p[0] * rz));
      const double ty = p[2] * std::fmin(lim_y_pos, std::fmax(-lim_y_neg, p[1] * rz));
      const double jac[2][3] = {{fx * rz, 0.0, -fx * tx * rz * rz},
                                {0.0, fy * rz, -fy * ty * rz * rz}};
      double cov[2][2];
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) {
          double sum = 0.0;
          for (int a = 0; a < 3; ++a) {
            for (int b = 0; b < 3; ++b) sum += jac[i][a] * sigma_c[a][b] * jac[j][b];
          }
          cov[i][j] = sum;
        }
      }
      const double a = cov[0][0] + eps2d, b = cov[0][1], d = cov[1][1] + eps2d;
      const double det = a * d - b * b;
      if (!(det > 0.0)) continue;
      const double u = fx * p[0] * rz + cx, v = fy * p[1] * rz + cy;
      const double radius_x = std::ceil(kExtend * std::sqrt(a));
      const double radius_y = std::ceil(kExtend * std::sqrt(d));
      if (u + radius_x <= 0 || u - radius_x >= width || v + radius_y <= 0 ||
          v - radius_y >= height) {
        continue;
      }
      radii.values[at * 2] = radius_x;
      radii.values[at * 2 + 1] = radius_y;
      means2d.values[at * 2] = u;
      means2d.values[at * 2 + 1] = v;
      depths.values[at] = p[2];
      conics.values[at * 3] = d / det;
      conics.values[at * 3 + 1] = -b / det;
      conics.values[at * 3 + 2] = a / det;
    }
  }
  return {};
}

}  // namespace

CRUCIBLE_ORACLE("science/gaussian_projection", gaussian_projection);

}  // namespace crucible::tasks
