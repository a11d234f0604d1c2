// The Gaussian-projection checker: the reference's values pass, fp32-sized differences and a
// radius one off pass, culled Gaussians' other outputs are not read, a Gaussian at the near plane
// may fall either way; a wrong centre, a radius two off, a Gaussian culled or kept away from any
// boundary and unwritten outputs fail; an ill-conditioned conic is only required written.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "judge/compare.hpp"
#include "judge/task_checker.hpp"
#include "tests/judge/checker_test_support.hpp"

using namespace crucible;
using core::DType;
using judge::CompareReport;
using judge::HostTensorView;
using judge::Tolerance;
using testing::all_pass;
using testing::contains;

namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Gaussians seen by an identity camera (fx = fy = 100, principal point (50, 40), a 100 x 80
// image, eps2d 0.3, near plane 0.01), with the reference's outputs worked by hand:
//  0: (0, 0, 2), scale 0.02: cov2d = 2500 * 0.0004 + 0.3 = 1.3 on the diagonal, radii 4.
//  1: (-1.2, 0, 2): off the image's left edge (u = -10, radius 5), culled.
//  2: (0, 0, 0.01), on the near plane: z = near_plane exactly, kept (z < near is false);
//     cov2d = 10^8 * 0.0004 + 0.3 on the diagonal, radii ceil(3.33 * 200.00075) = 667.
//  3: (0, 0, 0.02), scale 0.02: cov2d = 2.5e7 * 0.0004 + 0.3 = 10000.3, radii 334.
struct Scene {
  std::vector<float> means{0, 0, 2, -1.2f, 0, 2, 0, 0, 0.01f, 0, 0, 0.02f};
  std::vector<float> quats{1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0};
  std::vector<float> scales = std::vector<float>(12, 0.02f);
  std::vector<float> viewmats{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::vector<float> ks{100, 0, 50, 0, 100, 40, 0, 0, 1};
  std::vector<std::int32_t> radii{4, 4, 0, 0, 667, 667, 334, 334};
  std::vector<float> means2d{50, 40, 0, 0, 50, 40, 50, 40};
  std::vector<float> depths{2, 0, 0.01f, 0.02f};
  std::vector<float> conics{static_cast<float>(1 / 1.3),
                            0,
                            static_cast<float>(1 / 1.3),
                            0,
                            0,
                            0,
                            static_cast<float>(1 / 40000.3),
                            0,
                            static_cast<float>(1 / 40000.3),
                            static_cast<float>(1 / 10000.3),
                            0,
                            static_cast<float>(1 / 10000.3)};
  std::map<std::string, double> scalars{
      {"width", 100}, {"height", 80}, {"eps2d", 0.3}, {"near_plane", 0.01}, {"far_plane", 1e10}};

  std::int64_t count() const { return static_cast<std::int64_t>(means.size() / 3); }

  // The candidate `got` judged against this scene's reference outputs.
  std::vector<CompareReport> check(const Scene& got, bool reveal = true) const {
    const std::int64_t n = count();
    const std::vector<HostTensorView> inputs{
        {"means", DType::kF32, means.data(), means.size(), {n, 3}},
        {"quats", DType::kF32, quats.data(), quats.size(), {n, 4}},
        {"scales", DType::kF32, scales.data(), scales.size(), {n, 3}},
        {"viewmats", DType::kF32, viewmats.data(), viewmats.size(), {1, 4, 4}},
        {"Ks", DType::kF32, ks.data(), ks.size(), {1, 3, 3}}};
    const auto outputs = [n](const Scene& s) {
      return std::vector<HostTensorView>{
          {"radii", DType::kI32, s.radii.data(), s.radii.size(), {1, n, 2}},
          {"means2d", DType::kF32, s.means2d.data(), s.means2d.size(), {1, n, 2}},
          {"depths", DType::kF32, s.depths.data(), s.depths.size(), {1, n}},
          {"conics", DType::kF32, s.conics.data(), s.conics.size(), {1, n, 3}}};
    };
    const auto candidate = outputs(got);
    const auto reference = outputs(*this);
    const std::vector<Tolerance> tolerances{{1.0, 0.0}, {1e-3, 1e-5}, {1e-6, 1e-5}, {1e-5, 1e-4}};
    judge::TaskCheckRequest request;
    request.inputs = inputs;
    request.candidate = candidate;
    request.reference = reference;
    request.tolerances = tolerances;
    request.scalars = &scalars;
    request.reveal_values = reveal;
    return judge::gaussian_projection_checker().check(request);
  }
};

// The poison of variant 0 in an f32 / i32 element.
float f32_poison() {
  float value;
  const std::uint32_t bits = 0x7FC0FFEEu;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}
constexpr std::int32_t kI32Poison = static_cast<std::int32_t>(0xA5A5A5A5u);

}  // namespace

TEST_CASE("gaussian_projection checker: the reference's own values pass") {
  const Scene scene;
  const auto reports = scene.check(scene);
  REQUIRE(reports.size() == 4);
  CHECK(all_pass(reports));
  CHECK(contains(reports[0].summary, "kept or culled as the reference"));
}

TEST_CASE("gaussian_projection checker: culled Gaussians' other outputs are not read") {
  const Scene scene;
  Scene got = scene;
  got.means2d[2] = f32_poison();
  got.depths[1] = kNan;
  got.conics[3] = 123.0f;
  CHECK(all_pass(scene.check(got)));
}

TEST_CASE("gaussian_projection checker: a radius one off passes, two off fails") {
  const Scene scene;
  Scene got = scene;
  got.radii[0] = 5;
  got.radii[7] = 333;
  CHECK(all_pass(scene.check(got)));
  got.radii[1] = 6;
  const auto reports = scene.check(got);
  CHECK_FALSE(reports[0].pass);
  CHECK(reports[0].first_mismatch == 1);
  CHECK(contains(reports[0].summary, "camera 0, Gaussian 0: radius"));
}

TEST_CASE("gaussian_projection checker: centres, depths and conics within fp32 rounding") {
  const Scene scene;
  Scene got = scene;
  got.means2d[0] += 2e-4f;
  got.depths[0] = std::nextafter(got.depths[0], 3.0f);
  got.conics[0] = std::nextafter(got.conics[0], 1.0f);
  CHECK(all_pass(scene.check(got)));
  got.means2d[1] += 0.5f;  // half a pixel
  got.conics[2] *= 1.01f;  // 1 %
  got.depths[3] *= 1.001f;
  const auto reports = scene.check(got);
  CHECK(reports[0].pass);
  CHECK_FALSE(reports[1].pass);
  CHECK(reports[1].first_mismatch == 1);
  CHECK_FALSE(reports[2].pass);
  CHECK(reports[2].first_mismatch == 3);
  CHECK_FALSE(reports[3].pass);
  CHECK(reports[3].first_mismatch == 2);
  CHECK(contains(scene.check(got, false)[1].summary, "off by more than its tolerance"));
  CHECK_FALSE(contains(scene.check(got, false)[1].summary, "expected"));
}

TEST_CASE("gaussian_projection checker: culled or kept away from a boundary fails") {
  const Scene scene;
  Scene culled = scene;  // Gaussian 3, well inside the near plane, dropped
  culled.radii[6] = culled.radii[7] = 0;
  auto reports = scene.check(culled);
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "culled, but the reference keeps it"));
  Scene kept = scene;  // Gaussian 1, 5 px off the image, kept with made-up values
  kept.radii[2] = kept.radii[3] = 5;
  kept.means2d[2] = -10;
  kept.means2d[3] = 40;
  kept.depths[1] = 2;
  reports = scene.check(kept);
  CHECK_FALSE(reports[0].pass);
  CHECK(contains(reports[0].summary, "kept, but the reference culls it"));
}

TEST_CASE("gaussian_projection checker: at the near plane either way passes") {
  const Scene scene;
  Scene culled = scene;  // Gaussian 2 sits exactly on the near plane
  culled.radii[4] = culled.radii[5] = 0;
  culled.means2d[4] = f32_poison();
  CHECK(all_pass(scene.check(culled)));
  // The other way round: the reference culls it, the candidate keeps it with its float64 values;
  // wrong values are still caught.
  Scene reference = scene;
  reference.radii[4] = reference.radii[5] = 0;
  CHECK(all_pass(reference.check(scene)));
  Scene wrong = scene;
  wrong.means2d[4] = 60;
  const auto reports = reference.check(wrong);
  CHECK_FALSE(reports[1].pass);
  CHECK(reports[1].first_mismatch == 4);
}

TEST_CASE("gaussian_projection checker: unwritten outputs of a kept Gaussian fail") {
  const Scene scene;
  Scene got = scene;
  got.radii[1] = kI32Poison;
  got.conics[10] = f32_poison();  // Gaussian 3's xy
  const auto reports = scene.check(got);
  CHECK_FALSE(reports[0].pass);
  CHECK(reports[0].unwritten == 1);
  CHECK(contains(reports[0].summary, "radius never written"));
  CHECK_FALSE(reports[3].pass);
  CHECK(reports[3].unwritten == 1);
  CHECK(contains(reports[3].summary, "camera 0, Gaussian 3: conic xy never written"));
}

TEST_CASE("gaussian_projection checker: an ill-conditioned conic is only required written") {
  // A needle 1 long and 1e-6 thick, 0.05 in front of the camera: cov2d's larger eigenvalue is
  // ~4e6 against the blur's 0.3, so fp32 keeps no digit of the smaller one.
  Scene scene;
  scene.means = {0, 0, 0.05f};
  scene.quats = {1, 0, 0, 0};
  scene.scales = {1, 1e-6f, 1e-6f};
  const double a = 4e6 + 0.3;
  const double c = 0.3 + 4e6 * 1e-12;
  scene.radii = {static_cast<std::int32_t>(std::ceil(static_cast<double>(3.33f) * std::sqrt(a))),
                 static_cast<std::int32_t>(std::ceil(static_cast<double>(3.33f) * std::sqrt(c)))};
  scene.means2d = {50, 40};
  scene.depths = {0.05f};
  scene.conics = {static_cast<float>(1 / a), 0, static_cast<float>(1 / c)};
  CHECK(all_pass(scene.check(scene)));
  Scene got = scene;
  got.conics[2] *= 1.5f;
  CHECK(all_pass(scene.check(got)));
  got.conics[2] = f32_poison();
  CHECK_FALSE(scene.check(got)[3].pass);
}

TEST_CASE("gaussian_projection checker: a NaN in the reference is the reference's fault") {
  Scene reference;
  reference.means2d[0] = kNan;  // Gaussian 0 is kept
  const Scene got;
  const auto reports = reference.check(got);
  CHECK_FALSE(reports[1].pass);
  CHECK(reports[1].reference_invalid());
  CHECK(reports[1].mismatches == 0);
  CHECK(reports[0].pass);
}
