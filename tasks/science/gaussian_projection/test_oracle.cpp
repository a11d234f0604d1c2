// The science/gaussian_projection oracle on hand-computed projections (an isotropic Gaussian, an
// unnormalised rotated one, culling by depth and by the image's edges, the Jacobian's frustum
// clamp) and on its task's cases (kept Gaussians well formed, the cameras' scenes as described).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::Tensors;

struct One {
  std::vector<double> radii, means2d, depths, conics;
};

// One Gaussian seen by an identity camera (world = camera frame), fx = fy = 100, principal point
// (50, 40), a 100 x 80 image, eps2d 0.3.
One project_one(std::vector<double> mean, std::vector<double> quat, std::vector<double> scale) {
  const std::vector<double> identity{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  const Tensors out = oracle_test::call_oracle(
      "science/gaussian_projection", {{"num_cameras", 1}, {"num_gaussians", 1}},
      Tensors{
          {"means", {core::DType::kF32, {1, 3}, std::move(mean)}},
          {"quats", {core::DType::kF32, {1, 4}, std::move(quat)}},
          {"scales", {core::DType::kF32, {1, 3}, std::move(scale)}},
          {"viewmats", {core::DType::kF32, {1, 4, 4}, identity}},
          {"Ks", {core::DType::kF32, {1, 3, 3}, {100, 0, 50, 0, 100, 40, 0, 0, 1}}},
          {"radii", {core::DType::kI32, {1, 1, 2}, std::vector<double>(2)}},
          {"means2d", {core::DType::kF32, {1, 1, 2}, std::vector<double>(2)}},
          {"depths", {core::DType::kF32, {1, 1}, std::vector<double>(1)}},
          {"conics", {core::DType::kF32, {1, 1, 3}, std::vector<double>(3)}},
      },
      {{"width", 100}, {"height", 80}, {"eps2d", 0.3}, {"near_plane", 0.01}, {"far_plane", 1e10}});
  return {out.at("radii").values, out.at("means2d").values, out.at("depths").values,
          out.at("conics").values};
}

constexpr double kBlur = static_cast<double>(0.3f);

}  // namespace

TEST_CASE("gaussian_projection oracle: an isotropic Gaussian on the axis") {
  // z = 2: J = diag(50, 50) (no third column on the axis), Sigma = 0.02^2 I, so cov2d =
  // 2500 * 0.0004 + 0.3 = 1.3 on the diagonal; radius ceil(3.33 sqrt(1.3)) = ceil(3.797) = 4.
  const One one = project_one({0, 0, 2}, {1, 0, 0, 0}, {0.02, 0.02, 0.02});
  const double a = 2500 * 0.02 * 0.02 + kBlur;
  CHECK(one.radii == std::vector<double>{4, 4});
  CHECK(one.means2d == std::vector<double>{50, 40});
  CHECK(one.depths == std::vector<double>{2});
  CHECK(one.conics[0] == doctest::Approx(1 / a).epsilon(1e-12));
  CHECK(one.conics[1] == doctest::Approx(0.0));
  CHECK(one.conics[2] == doctest::Approx(1 / a).epsilon(1e-12));
}

TEST_CASE("gaussian_projection oracle: quaternions are normalised; per-axis radii") {
  // 3 * (cos 45, 0, 0, sin 45): a quarter turn about z, so the scales (0.04, 0.02, 0) become
  // variances 0.0004 along x and 0.0016 along y: cov2d = diag(1.3, 4.3), conic = (1/1.3, 0,
  // 1/4.3), radii ceil(3.797) = 4 and ceil(3.33 * 2.0736) = ceil(6.905) = 7.
  const double h = 3.0 * std::sqrt(0.5);
  const One one = project_one({0, 0, 2}, {h, 0, 0, h}, {0.04, 0.02, 0.0});
  const double a = 2500 * 0.0004 + kBlur, c = 2500 * 0.0016 + kBlur;
  CHECK(one.radii == std::vector<double>{4, 7});
  CHECK(one.conics[0] == doctest::Approx(1 / a).epsilon(1e-9));
  CHECK(std::fabs(one.conics[1]) < 1e-12);
  CHECK(one.conics[2] == doctest::Approx(1 / c).epsilon(1e-9));
}

TEST_CASE("gaussian_projection oracle: culled behind the camera, before the near plane") {
  for (const double z : {-1.0, 0.0, 0.005}) {
    CAPTURE(z);
    const One one = project_one({0, 0, z}, {1, 0, 0, 0}, {0.02, 0.02, 0.02});
    CHECK(one.radii == std::vector<double>{0, 0});
    CHECK(one.depths == std::vector<double>{0});
  }
}

TEST_CASE("gaussian_projection oracle: a centre off the image is kept while its box overlaps") {
  // x = -1.04 at z = 2: u = 100 * -0.52 + 50 = -2, off the image; J's third column -fx x / z^2
  // = 26, a = (2500 + 676) * 0.0004 + 0.3 = 1.5704, radius ceil(3.33 * 1.2532) = 5: -2 + 5 > 0.
  const One kept = project_one({-1.04, 0, 2}, {1, 0, 0, 0}, {0.02, 0.02, 0.02});
  CHECK(kept.radii == std::vector<double>{5, 4});
  CHECK(kept.means2d[0] == doctest::Approx(-2.0).epsilon(1e-12));
  // x = -1.2: u = -10, a = (2500 + 900) * 0.0004 + 0.3 = 1.66, radius 5: -10 + 5 <= 0, culled.
  const One culled = project_one({-1.2, 0, 2}, {1, 0, 0, 0}, {0.02, 0.02, 0.02});
  CHECK(culled.radii == std::vector<double>{0, 0});
}

TEST_CASE("gaussian_projection oracle: the Jacobian clamps x / z to the widened frustum") {
  // x / z = 2 past lim_x+ = (100 - 50) / 100 + 0.3 * 0.5 = 0.65: tx = 1.3, so J's third column
  // is -100 * 1.3 / 4 = -32.5 (unclamped: -100). Sigma = I: a = 2500 + 1056.25 + 0.3, c =
  // 2500.3; u = 250, radius ceil(3.33 sqrt(a)) = 199 reaches back into the 100-pixel image.
  const One one = project_one({4, 0, 2}, {1, 0, 0, 0}, {1, 1, 1});
  const double a = 2500 + 32.5 * 32.5 + kBlur, c = 2500 + kBlur;
  CHECK(one.radii == std::vector<double>{199, 167});
  CHECK(one.means2d[0] == doctest::Approx(250.0).epsilon(1e-12));
  CHECK(one.conics[0] == doctest::Approx(1 / a).epsilon(1e-9));
  CHECK(one.conics[2] == doctest::Approx(1 / c).epsilon(1e-9));
}

TEST_CASE("gaussian_projection oracle: on the cases, kept Gaussians are well formed") {
  // Every kept Gaussian: radii >= 2 (the blur alone gives 3.33 sqrt(0.3) = 1.82), a conic of a
  // positive definite matrix, a depth within the planes and a box overlapping the image; the
  // share kept is what each case's camera is said to see.
  const tasks::Task& task = oracle_test::repository_task("science/gaussian_projection");
  struct Expect {
    const char* name;
    double lo, hi;  // share of (camera, Gaussian) pairs kept
  };
  // Shares as the oracle finds them (0.48, 0.49, 0.11, 0.04, 0.37, 0.58), with room for another
  // draw of the same scene.
  for (const Expect e :
       {Expect{"h_odd_half_res", 0.35, 0.65}, Expect{"h_three_cameras", 0.35, 0.65},
        Expect{"h_camera_inside", 0.05, 0.2}, Expect{"h_away_and_telephoto", 0.02, 0.1},
        Expect{"h_near_far_planes", 0.2, 0.5}, Expect{"h_degenerate_scales", 0.4, 0.75}}) {
    const std::string name = e.name;
    CAPTURE(name);
    const tasks::Case& c = oracle_test::case_named(task, e.name);
    const Tensors t = oracle_test::run_case(task, c);
    const double width = c.scalars.at("width"), height = c.scalars.at("height");
    const double near_plane = static_cast<float>(c.scalars.at("near_plane"));
    const double far_plane = static_cast<float>(c.scalars.at("far_plane"));
    const auto& radii = t.at("radii").values;
    const auto& means2d = t.at("means2d").values;
    const auto& depths = t.at("depths").values;
    const auto& conics = t.at("conics").values;
    std::size_t kept = 0, bad = 0;
    for (std::size_t i = 0; i < depths.size(); ++i) {
      if (radii[i * 2] == 0 && radii[i * 2 + 1] == 0) continue;
      ++kept;
      const double qa = conics[i * 3], qb = conics[i * 3 + 1], qc = conics[i * 3 + 2];
      bad += radii[i * 2] < 2 || radii[i * 2 + 1] < 2 ? 1 : 0;
      bad += qa > 0 && qc > 0 && qa * qc - qb * qb > 0 ? 0 : 1;
      bad += depths[i] >= near_plane && depths[i] <= far_plane ? 0 : 1;
      bad += means2d[i * 2] + radii[i * 2] > 0 && means2d[i * 2] - radii[i * 2] < width ? 0 : 1;
      bad += means2d[i * 2 + 1] + radii[i * 2 + 1] > 0 &&
                     means2d[i * 2 + 1] - radii[i * 2 + 1] < height
                 ? 0
                 : 1;
    }
    const double share = static_cast<double>(kept) / static_cast<double>(depths.size());
    CHECK(bad == 0);
    CHECK(share >= e.lo);
    CHECK(share <= e.hi);
  }
}

TEST_CASE("gaussian_projection oracle: the camera looking away sees almost nothing") {
  // h_away_and_telephoto's camera 0 stands at the scene's edge facing out: only the floor's last
  // 0.05 lies in front of it, low in the image.
  const tasks::Task& task = oracle_test::repository_task("science/gaussian_projection");
  const tasks::Case& c = oracle_test::case_named(task, "h_away_and_telephoto");
  const Tensors t = oracle_test::run_case(task, c);
  const auto n = static_cast<std::size_t>(c.symbols.at("num_gaussians"));
  const auto& radii = t.at("radii").values;
  std::size_t kept_away = 0, kept_tele = 0;
  for (std::size_t i = 0; i < n; ++i) {
    kept_away += radii[i * 2] != 0 ? 1 : 0;
    kept_tele += radii[(n + i) * 2] != 0 ? 1 : 0;
  }
  CHECK(kept_away < n / 20);
  CHECK(kept_tele > n / 50);
}
