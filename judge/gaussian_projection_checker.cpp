// The Gaussian-projection checker (science/gaussian_projection, gsplat's fully_fused_projection):
// culled Gaussians leave means2d, depths and conics unspecified, a Gaussian at a culling
// boundary may fall either way in fp32, and the conic of a thin Gaussian seen large loses digits
// in fp32; so every projection is recomputed in float64 with a bound on the rounding of an fp32
// computation, and the candidate is judged with it.
//
// Inputs by name: means [N, 3], quats [N, 4] (wxyz), scales [N, 3], viewmats [C, 4, 4], Ks
// [C, 3, 3]; scalars width, height, eps2d, near_plane, far_plane. Outputs by name: radii [C, N, 2]
// (integer), means2d [C, N, 2], depths [C, N], conics [C, N, 3] (floating). A case without them
// is the server's misconfiguration, an InternalError.
//
// Rules, per camera c and Gaussian n (kept: a radius is non-zero; tolerance: the output's
// atol + rtol * |expected| plus kSafety times the fp32 rounding bound below):
//  - radii: both elements written, always.
//  - Kept by the candidate and the reference: radii within the tolerance of the reference's
//    (atol 1 covers a ceil at a boundary), means2d, depths and conics within theirs. The conics of
//    an ill-conditioned Gaussian (the fp32 rounding of cov2d reaches a tenth of its smaller
//    eigenvalue) are only required written.
//  - Culled by both: nothing else is read.
//  - Kept by one only: right only where fp32 rounding can put the Gaussian on either side of a
//    culling test (near or far plane, det <= 0, the radius box against the image's edges); a
//    candidate keeping such a Gaussian has its values held to the float64 projection.
// Rounding bounds (u = 2^-24; Mag = the largest |W| |mean| + |t| row sum): camera-space position
// dp = 4 u Mag; J's relative error rJ = dp / z (1 + |x / z| + |y / z|) + 4 u; cov2d's entries
// dS = (24 u + 2 rJ) |J|_F^2 max(scale)^2 + 2 u max(a, c) (the covariance is rounded at its
// unprojected size, whatever its projection); the conic (2 dS + 4 u l1) / l2^2 + 2 u / l2 with
// l1 >= l2 the eigenvalues of cov2d; a radius 3.33 dS / (2 sqrt(a)) + 2 u r; means2d
// fx dp / z (1 + |x / z|) + 4 u (|fx x / z| + |cx|).
// Cost: a float64 projection per (camera, Gaussian) that is kept by either side and not already
// within the bare tolerance of the reference, over up to 16 threads by ranges of Gaussians (0.1
// to 0.3 s a million projected pairs on one core of a build machine).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "core/numeric.hpp"
#include "core/result.hpp"
#include "judge/checker_support.hpp"
#include "judge/task_checker.hpp"
#include "tasks/rotation.hpp"

namespace crucible::judge {
namespace {

constexpr double kUnit = 0x1p-24;  // fp32 unit roundoff
// Bounds are of one fp32 computation against the exact value; the candidate and the reference
// are two of them, and the bounds are estimates: 4x margin on top.
constexpr double kSafety = 8.0;
constexpr double kExtend = static_cast<double>(3.33f);

double as_f32(double value) { return static_cast<double>(static_cast<float>(value)); }

struct Camera {
  double w[3][3];
  double t[3];
  double fx, fy, cx, cy;
  double lim_x_pos, lim_x_neg, lim_y_pos, lim_y_neg;
};

struct Scalars {
  double width, height, eps2d, near_plane, far_plane;
};

// One Gaussian's camera-independent part: its centre and R(q) diag(s).
struct Gaussian {
  double mean[3];
  double m[3][3];
  double scale2;  // max(scale)^2, the covariance's size
};

// The float64 projection of one Gaussian into one camera and the fp32 rounding bounds.
struct Projection {
  bool may_cull = true;   // some fp32 rounding culls it
  bool may_keep = false;  // some fp32 rounding keeps it
  bool ill_conditioned = false;
  double radius[2] = {0.0, 0.0};  // ceil(3.33 sqrt(.)) of the exact variances
  double radius_error[2] = {0.0, 0.0};
  double mean2d[2] = {0.0, 0.0};
  double mean_error[2] = {0.0, 0.0};
  double depth = 0.0;
  double depth_error = 0.0;
  double conic[3] = {0.0, 0.0, 0.0};
  double conic_error = 0.0;
};

Projection project(const Gaussian& g, const Camera& cam, const Scalars& s) {
  Projection out;
  double p[3];
  double magnitude = 0.0;
  for (int i = 0; i < 3; ++i) {
    double row = std::fabs(cam.t[i]);
    p[i] = cam.t[i];
    for (int j = 0; j < 3; ++j) {
      p[i] += cam.w[i][j] * g.mean[j];
      row += std::fabs(cam.w[i][j] * g.mean[j]);
    }
    magnitude = std::max(magnitude, row);
  }
  const double dp = 4.0 * kUnit * magnitude;
  const double z = p[2];
  out.depth = z;
  out.depth_error = dp + kUnit * std::fabs(z);
  const double dz = kSafety * out.depth_error;
  const bool may_keep_depth = z + dz >= s.near_plane && z - dz <= s.far_plane && z > 0.0;
  const bool may_cull_depth = z - dz < s.near_plane || z + dz > s.far_plane;
  if (!may_keep_depth) return out;  // culled whatever the rounding

  const double rz = 1.0 / z;
  const double xz = p[0] * rz, yz = p[1] * rz;
  const double tx = std::fmin(cam.lim_x_pos, std::fmax(-cam.lim_x_neg, xz));
  const double ty = std::fmin(cam.lim_y_pos, std::fmax(-cam.lim_y_neg, yz));
  // J W (J = [[fx / z, 0, -fx tx / z], [0, fy / z, -fy ty / z]], tx and ty as ratios here).
  double jw[2][3];
  for (int j = 0; j < 3; ++j) {
    jw[0][j] = cam.fx * rz * (cam.w[0][j] - tx * cam.w[2][j]);
    jw[1][j] = cam.fy * rz * (cam.w[1][j] - ty * cam.w[2][j]);
  }
  double tm[2][3];
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      tm[i][j] = jw[i][0] * g.m[0][j] + jw[i][1] * g.m[1][j] + jw[i][2] * g.m[2][j];
    }
  }
  const double a = tm[0][0] * tm[0][0] + tm[0][1] * tm[0][1] + tm[0][2] * tm[0][2] + s.eps2d;
  const double b = tm[0][0] * tm[1][0] + tm[0][1] * tm[1][1] + tm[0][2] * tm[1][2];
  const double c = tm[1][0] * tm[1][0] + tm[1][1] * tm[1][1] + tm[1][2] * tm[1][2] + s.eps2d;
  const double det = a * c - b * b;

  const double relative_j = dp * rz * (1.0 + std::fabs(xz) + std::fabs(yz)) + 4.0 * kUnit;
  const double j_norm2 =
      cam.fx * cam.fx * rz * rz * (1.0 + tx * tx) + cam.fy * cam.fy * rz * rz * (1.0 + ty * ty);
  const double cov_error =
      (24.0 * kUnit + 2.0 * relative_j) * j_norm2 * g.scale2 + 2.0 * kUnit * std::max(a, c);
  const double half_trace = 0.5 * (a + c);
  const double spread = std::sqrt(0.25 * (a - c) * (a - c) + b * b);
  const double l1 = half_trace + spread;
  const double l2 = det > 0.0 ? det / l1 : 0.0;
  out.ill_conditioned = !(cov_error <= 0.1 * l2);
  const double det_error = 4.0 * cov_error * (a + c) + 4.0 * kUnit * l1 * l1;
  const bool may_cull_det = !(det > kSafety * det_error);
  const bool may_keep_det = det + kSafety * det_error > 0.0;
  if (det > 0.0) {
    out.conic[0] = c / det;
    out.conic[1] = -b / det;
    out.conic[2] = a / det;
    out.conic_error = (2.0 * cov_error + 4.0 * kUnit * l1) / (l2 * l2) + 2.0 * kUnit / l2;
  }

  const double variance[2] = {a, c};
  for (int axis = 0; axis < 2; ++axis) {
    const double rho = kExtend * std::sqrt(variance[axis]);
    out.radius[axis] = std::ceil(rho);
    out.radius_error[axis] =
        kExtend * cov_error / (2.0 * std::sqrt(variance[axis])) + 2.0 * kUnit * rho;
  }
  const double focal[2] = {cam.fx, cam.fy};
  const double centre[2] = {cam.cx, cam.cy};
  const double ratio[2] = {xz, yz};
  const double extent[2] = {s.width, s.height};
  bool may_cull_screen = false, may_keep_screen = true;
  for (int axis = 0; axis < 2; ++axis) {
    const double projected = focal[axis] * ratio[axis];
    out.mean2d[axis] = projected + centre[axis];
    out.mean_error[axis] = focal[axis] * dp * rz * (1.0 + std::fabs(ratio[axis])) +
                           4.0 * kUnit * (std::fabs(projected) + std::fabs(centre[axis]));
    const double e = kSafety * out.mean_error[axis];
    const double r = kExtend * std::sqrt(variance[axis]);
    const double re = kSafety * out.radius_error[axis];
    const double r_lo = std::ceil(r - re), r_hi = std::ceil(r + re);
    const double m = out.mean2d[axis];
    // Off the low edge (m + r <= 0) or off the high edge (m - r >= extent), for some rounding.
    may_cull_screen |= (m - e) + r_lo <= 0.0 || (m + e) - r_lo >= extent[axis];
    may_keep_screen &= (m + e) + r_hi > 0.0 && (m - e) - r_hi < extent[axis];
  }
  out.may_cull = may_cull_depth || may_cull_det || may_cull_screen;
  out.may_keep = may_keep_det && may_keep_screen;
  return out;
}

std::string at_text(std::int64_t c, std::int64_t n) {
  return "camera " + std::to_string(c) + ", Gaussian " + std::to_string(n) + ": ";
}

// One output's failures over a worker's share of the Gaussians, merged into a CompareReport
// afterwards: the counts, and the failure at the smallest flat index with its sentence.
struct Tally {
  std::size_t mismatches = 0;
  std::size_t unwritten = 0;
  std::size_t reference_nans = 0;
  bool any = false;
  std::size_t first = 0;
  double got = 0.0;
  double expected = 0.0;
  bool first_unwritten = false;
  std::string reason;

  template <class Reason>
  void fail(std::size_t at, double value, double want, bool unwritten_element, Reason&& why) {
    if (!any || at < first) {
      any = true;
      first = at;
      got = value;
      expected = want;
      first_unwritten = unwritten_element;
      reason = why();
    }
    ++mismatches;
    if (unwritten_element) ++unwritten;
  }

  void merge(const Tally& other) {
    mismatches += other.mismatches;
    unwritten += other.unwritten;
    reference_nans += other.reference_nans;
    if (other.any && (!any || other.first < first)) {
      any = true;
      first = other.first;
      got = other.got;
      expected = other.expected;
      first_unwritten = other.first_unwritten;
      reason = other.reason;
    }
  }
};

// Gaussians a worker takes at least: below that, threads cost more than they save.
constexpr std::int64_t kGaussiansPerWorker = 1 << 16;

class GaussianProjectionChecker final : public TaskChecker {
 public:
  std::vector<CompareReport> check(const TaskCheckRequest& request) const override {
    const auto candidate = request.candidate;
    const auto reference = request.reference;
    const HostTensorView* means = find_named(request.inputs, "means");
    const HostTensorView* quats = find_named(request.inputs, "quats");
    const HostTensorView* scales = find_named(request.inputs, "scales");
    const HostTensorView* viewmats = find_named(request.inputs, "viewmats");
    const HostTensorView* ks = find_named(request.inputs, "Ks");
    const char* names[4] = {"radii", "means2d", "depths", "conics"};
    const HostTensorView* got[4];
    const HostTensorView* want[4];
    bool complete = candidate.size() == 4 && reference.size() == 4 &&
                    request.tolerances.size() == 4 && request.scalars != nullptr &&
                    means != nullptr && quats != nullptr && scales != nullptr &&
                    viewmats != nullptr && ks != nullptr;
    for (int i = 0; i < 4 && complete; ++i) {
      got[i] = find_named(candidate, names[i]);
      want[i] = find_named(reference, names[i]);
      complete = got[i] != nullptr && want[i] != nullptr && got[i]->count == want[i]->count &&
                 got[i]->dtype == want[i]->dtype &&
                 core::dtype_is_floating(got[i]->dtype) == (i != 0);
    }
    if (!complete) {
      throw core::InternalError(
          "gaussian_projection checker: needs means, quats, scales, viewmats and Ks, the scalars, "
          "and the outputs radii (integer), means2d, depths and conics (floating)");
    }
    const auto gaussians = static_cast<std::int64_t>(means->count / 3);
    const auto cameras = static_cast<std::int64_t>(viewmats->count / 16);
    const auto pairs = static_cast<std::size_t>(cameras * gaussians);
    if (quats->count != static_cast<std::size_t>(gaussians) * 4 || scales->count != means->count ||
        ks->count != static_cast<std::size_t>(cameras) * 9 || got[0]->count != pairs * 2 ||
        got[1]->count != pairs * 2 || got[2]->count != pairs || got[3]->count != pairs * 3) {
      throw core::InternalError(
          "gaussian_projection checker: shapes of the inputs and outputs disagree");
    }
    const auto scalar = [&](const char* name) {
      const auto it = request.scalars->find(name);
      if (it == request.scalars->end()) {
        throw core::InternalError(std::string("gaussian_projection checker: no scalar ") + name);
      }
      return it->second;
    };
    const Scalars s{scalar("width"), scalar("height"), as_f32(scalar("eps2d")),
                    as_f32(scalar("near_plane")), as_f32(scalar("far_plane"))};

    // Which tolerance belongs to which output (manifest order may differ from names[]).
    Tolerance tol[4];
    for (int i = 0; i < 4; ++i) {
      for (std::size_t j = 0; j < candidate.size(); ++j) {
        if (&candidate[j] == got[i]) tol[i] = request.tolerances[j];
      }
    }

    std::vector<Camera> cams(static_cast<std::size_t>(cameras));
    for (std::int64_t c = 0; c < cameras; ++c) {
      Camera& cam = cams[static_cast<std::size_t>(c)];
      const auto view = static_cast<std::size_t>(c * 16);
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
          cam.w[i][j] = element_of(*viewmats, view + static_cast<std::size_t>(i * 4 + j));
        }
        cam.t[i] = element_of(*viewmats, view + static_cast<std::size_t>(i * 4 + 3));
      }
      const auto k = static_cast<std::size_t>(c * 9);
      cam.fx = element_of(*ks, k), cam.cx = element_of(*ks, k + 2);
      cam.fy = element_of(*ks, k + 4), cam.cy = element_of(*ks, k + 5);
      const double tan_x = 0.5 * s.width / cam.fx, tan_y = 0.5 * s.height / cam.fy;
      cam.lim_x_pos = (s.width - cam.cx) / cam.fx + 0.3 * tan_x;
      cam.lim_x_neg = cam.cx / cam.fx + 0.3 * tan_x;
      cam.lim_y_pos = (s.height - cam.cy) / cam.fy + 0.3 * tan_y;
      cam.lim_y_neg = cam.cy / cam.fy + 0.3 * tan_y;
    }

    const bool reveal = request.reveal_values;
    const int variant = request.poison_variant;

    // Judges Gaussians [begin, end) into tally[0..3] (radii, means2d, depths, conics).
    const auto run = [&](std::int64_t begin, std::int64_t end, Tally* tally) {
      // Output `o`, element `at`, against `expected` within its tolerance plus `bound`.
      const auto judge = [&](int o, std::size_t at, double expected, double bound, std::int64_t c,
                             std::int64_t n, const char* what) {
        if (std::isnan(expected)) {  // the reference's fault, never the candidate's
          ++tally[o].reference_nans;
          return;
        }
        const double value = element_of(*got[o], at);
        const double allowed = tol[o].atol + tol[o].rtol * std::fabs(expected) + kSafety * bound;
        if (std::fabs(value - expected) <= allowed) return;
        const bool unwritten = is_poison(got[o]->dtype, got[o]->data, at, variant);
        tally[o].fail(at, value, expected, unwritten, [&] {
          if (unwritten) return at_text(c, n) + what + " never written (the Gaussian is kept)";
          return at_text(c, n) + what +
                 (reveal ? " is " + format_number(value) + ", expected " + format_number(expected) +
                               " within " + format_number(allowed)
                         : std::string(" is off by more than its tolerance"));
        });
      };
      const auto written = [&](int o, std::size_t at, std::int64_t c, std::int64_t n,
                               const char* what) {
        if (!is_poison(got[o]->dtype, got[o]->data, at, variant)) return;
        tally[o].fail(at, 0.0, 0.0, true, [&] {
          return at_text(c, n) + what + " never written (the Gaussian is kept)";
        });
      };

      // Output `o`'s element `at` written and within atol + rtol * |reference's|.
      const auto close = [&](int o, std::size_t at) {
        const double value = element_of(*got[o], at), expected = element_of(*want[o], at);
        return std::fabs(value - expected) <= tol[o].atol + tol[o].rtol * std::fabs(expected) &&
               !is_poison(got[o]->dtype, got[o]->data, at, variant);
      };
      const auto agrees = [&](std::size_t pair) {
        return close(0, pair * 2) && close(0, pair * 2 + 1) && close(1, pair * 2) &&
               close(1, pair * 2 + 1) && close(2, pair) && close(3, pair * 3) &&
               close(3, pair * 3 + 1) && close(3, pair * 3 + 2);
      };

      Gaussian g{};
      for (std::int64_t n = begin; n < end; ++n) {
        bool loaded = false;
        for (std::int64_t c = 0; c < cameras; ++c) {
          const auto pair = static_cast<std::size_t>(c * gaussians + n);
          const double got_r[2] = {element_of(*got[0], pair * 2),
                                   element_of(*got[0], pair * 2 + 1)};
          const double want_r[2] = {element_of(*want[0], pair * 2),
                                    element_of(*want[0], pair * 2 + 1)};
          bool radii_written = true;
          for (int axis = 0; axis < 2; ++axis) {
            const std::size_t at = pair * 2 + static_cast<std::size_t>(axis);
            if (is_poison(got[0]->dtype, got[0]->data, at, variant) &&
                got_r[axis] != want_r[axis]) {
              radii_written = false;
              tally[0].fail(at, got_r[axis], want_r[axis], true,
                            [&] { return at_text(c, n) + "radius never written"; });
            }
          }
          if (!radii_written) continue;
          const bool got_keep = got_r[0] != 0.0 || got_r[1] != 0.0;
          const bool want_keep = want_r[0] != 0.0 || want_r[1] != 0.0;
          if (!got_keep && !want_keep) continue;
          // Kept by both and every value within the bare tolerance of the reference's: the full
          // rules (tolerance plus a rounding bound, or only "written" for an ill-conditioned
          // conic) accept it too, so the float64 projection is skipped.
          if (got_keep && want_keep && agrees(pair)) continue;

          if (!loaded) {
            load_gaussian(*means, *quats, *scales, n, g);
            loaded = true;
          }
          const Projection p = project(g, cams[static_cast<std::size_t>(c)], s);
          if (got_keep != want_keep && !(p.may_cull && p.may_keep)) {
            tally[0].fail(pair * 2, got_r[0], want_r[0], false, [&] {
              return at_text(c, n) +
                     (got_keep ? "kept, but the reference culls it and it is not at a culling "
                                 "boundary"
                               : "culled, but the reference keeps it and it is not at a culling "
                                 "boundary");
            });
            continue;
          }
          if (!got_keep) continue;  // culled at a boundary: right either way

          // Kept: against the reference where it keeps the Gaussian too, else against float64.
          const bool by_reference = want_keep;
          const auto expected = [&](int o, std::size_t at, double exact) {
            return by_reference ? element_of(*want[o], at) : exact;
          };
          for (int axis = 0; axis < 2; ++axis) {
            const std::size_t at = pair * 2 + static_cast<std::size_t>(axis);
            // Radii: the tolerance (atol 1: a ceil at a boundary) plus what the rounding bound
            // spans beyond one step.
            const double span = std::ceil(kSafety * p.radius_error[axis]);
            judge(0, at, expected(0, at, p.radius[axis]), std::max(0.0, span - 1.0) / kSafety, c, n,
                  "radius");
            judge(1, at, expected(1, at, p.mean2d[axis]), p.mean_error[axis], c, n,
                  axis == 0 ? "means2d.x" : "means2d.y");
          }
          judge(2, pair, expected(2, pair, p.depth), p.depth_error, c, n, "depth");
          const char* conic_names[3] = {"conic xx", "conic xy", "conic yy"};
          for (int k = 0; k < 3; ++k) {
            const std::size_t at = pair * 3 + static_cast<std::size_t>(k);
            if (p.ill_conditioned) {
              written(3, at, c, n, conic_names[k]);
            } else {
              judge(3, at, expected(3, at, p.conic[k]), p.conic_error, c, n, conic_names[k]);
            }
          }
        }
      }
    };

    // Workers over contiguous ranges of Gaussians (a Gaussian's cameras stay with one worker).
    const std::int64_t hardware =
        std::clamp<std::int64_t>(std::thread::hardware_concurrency(), 1, 16);
    const std::int64_t workers =
        std::clamp<std::int64_t>(gaussians / kGaussiansPerWorker, 1, hardware);
    const std::int64_t share = (gaussians + workers - 1) / workers;
    std::vector<std::array<Tally, 4>> tallies(static_cast<std::size_t>(workers));
    std::vector<std::thread> threads;
    for (std::int64_t w = 1; w < workers; ++w) {
      threads.emplace_back(run, w * share, std::min(gaussians, (w + 1) * share),
                           tallies[static_cast<std::size_t>(w)].data());
    }
    run(0, std::min(gaussians, share), tallies[0].data());
    for (auto& thread : threads) thread.join();
    std::array<Tally, 4> total;
    for (const auto& worker : tallies) {
      for (int o = 0; o < 4; ++o)
        total[static_cast<std::size_t>(o)].merge(worker[static_cast<std::size_t>(o)]);
    }

    const char* pass_text[4] = {
        "every Gaussian kept or culled as the reference, or at a culling boundary; radii within 1",
        "every kept Gaussian's centre within its tolerance and fp32 rounding bound",
        "every kept Gaussian's depth within its tolerance and fp32 rounding bound",
        "every kept Gaussian's conic within its tolerance and fp32 rounding bound"};
    const char* rule_text[4] = {
        "radii written; kept or culled as the reference except at a culling boundary; within atol",
        "within atol + rtol * |ref| + the fp32 rounding bound, where the Gaussian is kept",
        "within atol + rtol * |ref| + the fp32 rounding bound, where the Gaussian is kept",
        "within atol + rtol * |ref| + the fp32 rounding bound (not judged where ill-conditioned), "
        "where the Gaussian is kept"};
    std::vector<CompareReport> reports(4);
    for (std::size_t j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        if (&candidate[j] != got[i]) continue;
        const Tally& t = total[static_cast<std::size_t>(i)];
        // The merged tally through the shared report builder: the first failure with its
        // sentence, then the others counted (the builder keeps the first's text).
        Failures failures(*got[i], tol[i], reveal);
        if (t.any) {
          failures.fail(t.first, t.got, t.expected, t.first_unwritten, [&] { return t.reason; });
          std::size_t unwritten_left = t.unwritten - (t.first_unwritten ? 1 : 0);
          for (std::size_t k = 1; k < t.mismatches; ++k) {
            const bool unwritten = unwritten_left > 0;
            unwritten_left -= unwritten ? 1 : 0;
            failures.fail(t.first, 0.0, 0.0, unwritten, [] { return std::string(); });
          }
        }
        reports[j] = failures.finish(pass_text[i], rule_text[i]);
        if (t.reference_nans > 0) {
          reports[j].reference_nans = t.reference_nans;
          reports[j].pass = false;
        }
      }
    }
    return reports;
  }

 private:
  static void load_gaussian(const HostTensorView& means, const HostTensorView& quats,
                            const HostTensorView& scales, std::int64_t n, Gaussian& g) {
    const auto base3 = static_cast<std::size_t>(n * 3);
    const auto base4 = static_cast<std::size_t>(n * 4);
    double q[4], s[3];
    for (int i = 0; i < 4; ++i) q[i] = element_of(quats, base4 + static_cast<std::size_t>(i));
    g.scale2 = 0.0;
    for (int j = 0; j < 3; ++j) {
      s[j] = element_of(scales, base3 + static_cast<std::size_t>(j));
      g.scale2 = std::max(g.scale2, s[j] * s[j]);
      g.mean[j] = element_of(means, base3 + static_cast<std::size_t>(j));
    }
    tasks::rotation_times_scale(q, s, g.m);
  }
};

}  // namespace

const TaskChecker& gaussian_projection_checker() {
  static const GaussianProjectionChecker checker;
  return checker;
}

}  // namespace crucible::judge
