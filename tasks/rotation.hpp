// The factor M = R(q) diag(s) of a 3-D Gaussian's covariance M M^T (3D Gaussian splatting): R
// the rotation of the quaternion q = (w, x, y, z) normalised, s the per-axis scales. Shared by
// science/gaussian_projection's float64 oracle and its checker (judge/), so both build the same
// covariance.
#pragma once

#include <cmath>

namespace crucible::tasks {

inline void rotation_times_scale(const double q[4], const double s[3], double m[3][3]) {
  const double norm = std::sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]);
  const double w = q[0] / norm, x = q[1] / norm, y = q[2] / norm, z = q[3] / norm;
  const double rot[3][3] = {
      {1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
      {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
      {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)},
  };
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) m[i][j] = rot[i][j] * s[j];
  }
}

}  // namespace crucible::tasks
