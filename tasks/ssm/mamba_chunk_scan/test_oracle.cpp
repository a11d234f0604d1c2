// The ssm/mamba_chunk_scan oracle: hand-computed tokens across a partial chunk, agreement with
// the Mamba-2 recurrence run token by token (the chunk scan's inputs built from it, as the
// earlier SSD stages do), the cases' stated guarantees, and finite outputs under strong decay.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "ssm/mamba_chunk_scan";

struct Scan {
  std::int64_t batch, seqlen, chunk, heads, hdim, groups, dstate;
  std::vector<double> cb, x, dt, da, c, states, d;
  std::int64_t nchunks() const { return (seqlen + chunk - 1) / chunk; }
};

oracle_test::Tensors tensors_of(const Scan& s) {
  const std::int64_t nc = s.nchunks();
  return {
      {"cb", {core::DType::kF32, {s.batch, nc, s.groups, s.chunk, s.chunk}, s.cb}},
      {"x", {core::DType::kBF16, {s.batch, s.seqlen, s.heads, s.hdim}, s.x}},
      {"dt", {core::DType::kF32, {s.batch, s.heads, nc, s.chunk}, s.dt}},
      {"dA_cumsum", {core::DType::kF32, {s.batch, s.heads, nc, s.chunk}, s.da}},
      {"C", {core::DType::kBF16, {s.batch, s.seqlen, s.groups, s.dstate}, s.c}},
      {"states", {core::DType::kBF16, {s.batch, nc, s.heads, s.hdim, s.dstate}, s.states}},
      {"D", {core::DType::kF32, {s.heads}, s.d}},
      {"out",
       {core::DType::kBF16,
        {s.batch, s.seqlen, s.heads, s.hdim},
        std::vector<double>(s.x.size(), 0.0)}},
  };
}

std::map<std::string, std::int64_t> symbols_of(const Scan& s) {
  return {{"batch", s.batch},      {"seqlen", s.seqlen}, {"nchunks", s.nchunks()},
          {"chunk_size", s.chunk}, {"nheads", s.heads},  {"headdim", s.hdim},
          {"ngroups", s.groups},   {"dstate", s.dstate}};
}

// A deterministic value in [lo, hi) for index i.
double spread(std::size_t i, double lo, double hi) {
  return lo + (hi - lo) * std::fmod(0.6180339887498949 * static_cast<double>(i + 1), 1.0);
}

}  // namespace

TEST_CASE("mamba_chunk_scan oracle: hand-computed tokens over a partial chunk") {
  // One head, headdim 1, dstate 1, chunks of 2 over 3 tokens (the second chunk has one token).
  Scan s{1, 3, 2, 1, 1, 1, 1, {}, {}, {}, {}, {}, {}, {0.5}};
  s.cb = {2, 99, 3, 4, /* chunk 1 */ 5, 99, 99, 99};  // 99: above the diagonal or past seqlen
  s.x = {1, 2, 3};
  s.dt = {0.1, 0.2, /* chunk 1 */ 0.3, 7};
  s.da = {-0.1, -0.3, /* chunk 1 */ -0.6, -9};
  s.c = {1.5, -1, 2};
  s.states = {0.25, /* chunk 1 */ -0.5};
  const auto out = oracle_test::call_oracle(kTask, symbols_of(s), tensors_of(s)).at("out").values;
  // t = 0: exp(-0.1) 1.5 0.25 + 2 0.1 1 + 0.5 1.
  CHECK(out[0] == doctest::Approx(std::exp(-0.1) * 0.375 + 0.2 + 0.5).epsilon(1e-14));
  // t = 1: exp(-0.3) (-1) 0.25 + 3 exp(-0.2) 0.1 1 + 4 0.2 2 + 0.5 2.
  CHECK(out[1] ==
        doctest::Approx(-std::exp(-0.3) * 0.25 + 0.3 * std::exp(-0.2) + 1.6 + 1.0).epsilon(1e-14));
  // t = 2 (chunk 1, position 0): exp(-0.6) 2 (-0.5) + 5 0.3 3 + 0.5 3.
  CHECK(out[2] == doctest::Approx(-std::exp(-0.6) + 4.5 + 1.5).epsilon(1e-14));
}

TEST_CASE("mamba_chunk_scan oracle: equals the Mamba-2 recurrence token by token") {
  // h_t = exp(A dt_t) h_(t-1) + dt_t x_t B_t^T, y_t = h_t C_t + D x_t, from a zero state; the
  // scan's inputs built from it: cb = C B^T within a chunk, dA_cumsum the running sums of A dt,
  // states the recurrence's state at each chunk's start.
  const std::int64_t batch = 2, seqlen = 11, chunk = 4, heads = 4, hdim = 3, groups = 2, dstate = 5;
  Scan s{batch, seqlen, chunk, heads, hdim, groups, dstate, {}, {}, {}, {}, {}, {}, {}};
  const std::int64_t nc = s.nchunks();
  std::vector<double> b_in(static_cast<std::size_t>(batch * seqlen * groups * dstate));
  std::vector<double> a(static_cast<std::size_t>(heads)),
      step(static_cast<std::size_t>(batch * seqlen * heads));
  for (std::size_t i = 0; i < b_in.size(); ++i) b_in[i] = spread(i, -1, 1);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = spread(i + 100, -3, -0.5);
  for (std::size_t i = 0; i < step.size(); ++i) step[i] = spread(i + 200, 0.01, 0.5);
  s.x.resize(static_cast<std::size_t>(batch * seqlen * heads * hdim));
  for (std::size_t i = 0; i < s.x.size(); ++i) s.x[i] = spread(i + 300, -2, 2);
  s.c.resize(b_in.size());
  for (std::size_t i = 0; i < s.c.size(); ++i) s.c[i] = spread(i + 400, -1, 1);
  s.d = {0.5, 1.0, 1.5, -0.25};
  s.cb.assign(static_cast<std::size_t>(batch * nc * groups * chunk * chunk), 0.0);
  s.dt.assign(static_cast<std::size_t>(batch * heads * nc * chunk), 0.0);
  s.da.assign(s.dt.size(), 0.0);
  s.states.assign(static_cast<std::size_t>(batch * nc * heads * hdim * dstate), 0.0);
  std::vector<double> expected(s.x.size());
  auto bc = [&](const std::vector<double>& v, std::int64_t b, std::int64_t l, std::int64_t g,
                std::int64_t n) {
    return v[static_cast<std::size_t>(((b * seqlen + l) * groups + g) * dstate + n)];
  };
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t g = h / (heads / groups);
      std::vector<double> state(static_cast<std::size_t>(hdim * dstate), 0.0);
      double running = 0.0;
      for (std::int64_t l = 0; l < seqlen; ++l) {
        const std::int64_t c = l / chunk, t = l % chunk;
        if (t == 0) {
          running = 0.0;
          for (std::size_t i = 0; i < state.size(); ++i) {
            s.states[static_cast<std::size_t>(((b * nc + c) * heads + h) * hdim * dstate) + i] =
                state[i];
          }
        }
        const double dt = step[static_cast<std::size_t>((b * seqlen + l) * heads + h)];
        running += a[static_cast<std::size_t>(h)] * dt;
        const auto row = static_cast<std::size_t>(((b * heads + h) * nc + c) * chunk + t);
        s.dt[row] = dt;
        s.da[row] = running;
        if (h % (heads / groups) == 0) {
          for (std::int64_t u = 0; u <= t; ++u) {
            double dot = 0.0;
            for (std::int64_t n = 0; n < dstate; ++n)
              dot += bc(s.c, b, l, g, n) * bc(b_in, b, l - t + u, g, n);
            s.cb[static_cast<std::size_t>((((b * nc + c) * groups + g) * chunk + t) * chunk + u)] =
                dot;
          }
        }
        const double decay = std::exp(a[static_cast<std::size_t>(h)] * dt);
        for (std::int64_t p = 0; p < hdim; ++p) {
          const auto xi = static_cast<std::size_t>(((b * seqlen + l) * heads + h) * hdim + p);
          double y = 0.0;
          for (std::int64_t n = 0; n < dstate; ++n) {
            double& cell = state[static_cast<std::size_t>(p * dstate + n)];
            cell = cell * decay + dt * s.x[xi] * bc(b_in, b, l, g, n);
            y += cell * bc(s.c, b, l, g, n);
          }
          expected[xi] = y + s.d[static_cast<std::size_t>(h)] * s.x[xi];
        }
      }
    }
  }
  const auto out = oracle_test::call_oracle(kTask, symbols_of(s), tensors_of(s)).at("out").values;
  for (std::size_t i = 0; i < out.size(); ++i)
    CHECK(out[i] == doctest::Approx(expected[i]).epsilon(1e-12));
}

TEST_CASE("mamba_chunk_scan oracle: refuses a wrong chunk count and ungrouped heads") {
  Scan s{1,  3,  2,         2,  1,     1, 1, {2, 0, 3, 4, 5, 0, 0, 0}, {1, 2, 3, 4, 5, 6},
         {}, {}, {1, 2, 3}, {}, {1, 1}};
  s.dt.assign(8, 0.1);
  s.da.assign(8, -0.1);
  s.states.assign(4, 0.5);
  auto tensors = tensors_of(s);
  CHECK(oracle_test::oracle_status(kTask, symbols_of(s), tensors).ok());
  auto wrong_chunks = symbols_of(s);
  wrong_chunks["nchunks"] = 3;
  CHECK_FALSE(oracle_test::oracle_status(kTask, wrong_chunks, tensors).ok());
  auto three_groups = symbols_of(s);
  three_groups["ngroups"] = 3;
  CHECK_FALSE(oracle_test::oracle_status(kTask, three_groups, tensors).ok());
}

TEST_CASE("mamba_chunk_scan: every case fits the kernel's stated guarantees") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  for (const auto& c : task.cases) {
    const std::int64_t chunk = c.symbols.at("chunk_size");
    CHECK_MESSAGE(c.symbols.at("nchunks") == (c.symbols.at("seqlen") + chunk - 1) / chunk, c.name);
    CHECK_MESSAGE(chunk % 16 == 0, c.name);
    CHECK_MESSAGE(chunk <= 256, c.name);
    CHECK_MESSAGE(c.symbols.at("headdim") == 64, c.name);
    CHECK_MESSAGE(c.symbols.at("dstate") == 128, c.name);
    CHECK_MESSAGE(c.symbols.at("nheads") % c.symbols.at("ngroups") == 0, c.name);
    // dA_cumsum lists: non-increasing within every chunk the list lays out (their lengths are
    // multiples of 256, so a chunk of 128 or 256 never straddles the list's wrap), dt positive.
    const auto& da = c.values.at("dA_cumsum");
    REQUIRE_MESSAGE(da.kind == tasks::GeneratorKind::kList, c.name);
    CHECK_MESSAGE(da.list.size() % 256 == 0, c.name);
    for (std::size_t i = 1; i < da.list.size(); ++i) {
      if (i % static_cast<std::size_t>(chunk) != 0)
        CHECK_MESSAGE(da.list[i] <= da.list[i - 1], c.name << " at " << i);
    }
    const auto& dt = c.values.at("dt");
    if (dt.kind == tasks::GeneratorKind::kList) {
      for (const double v : dt.list) CHECK_MESSAGE(v > 0.0, c.name);
    } else {
      REQUIRE_MESSAGE(dt.kind == tasks::GeneratorKind::kConstant, c.name);
      CHECK_MESSAGE(dt.value > 0.0, c.name);
    }
  }
}

TEST_CASE("mamba_chunk_scan oracle: strong decay stays finite") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  const auto tensors = oracle_test::run_case(task, oracle_test::case_named(task, "h_strong_decay"));
  for (const double v : tensors.at("out").values) REQUIRE(std::isfinite(v));
}
