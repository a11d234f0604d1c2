// Every task has a CPU float64 oracle, and each oracle computes finite values on its task's
// cases (the small ones here; tests/kernels/test_references_gpu.cpp holds the references to them).
#include <doctest/doctest.h>

#include <cmath>

#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

TEST_CASE("oracles: every task in the repository has an oracle") {
  for (const auto& task : oracle_test::repository().all()) {
    CAPTURE(task.id);
    CHECK(tasks::find_oracle(task.id) != nullptr);
  }
}

TEST_CASE("oracles: each oracle fills every output with finite values on its small cases") {
  for (const auto& task : oracle_test::repository().all()) {
    for (const auto& c : task.cases) {
      std::size_t elements = 0;
      for (const auto& tensor : task.tensors) {
        const auto count = tasks::element_count(tensor, c);
        REQUIRE(count.ok());
        elements += static_cast<std::size_t>(*count);
      }
      if (elements > (std::size_t{1} << 22)) continue;  // large cases run on the GPU suite
      CAPTURE(task.id);
      CAPTURE(c.name);
      const oracle_test::Tensors tensors = oracle_test::run_case(task, c);
      for (const auto& spec : task.tensors) {
        if (!tasks::is_output(spec.role)) continue;
        const auto& values = tensors.at(spec.name).values;
        std::size_t bad = 0;
        for (const double v : values) bad += std::isfinite(v) ? 0 : 1;
        CAPTURE(spec.name);
        CHECK(bad == 0);
      }
    }
  }
}

TEST_CASE("oracles: rms_norm on a hand-computed row") {
  // input row (3, 4) with weight (1, 2): rms = sqrt((9 + 16) / 2) = sqrt(12.5).
  auto tensors = oracle_test::call_oracle("llm/rms_norm", {{"num_tokens", 1}, {"hidden_size", 2}},
                                          oracle_test::Tensors{
                                              {"input", {core::DType::kBF16, {1, 2}, {3.0, 4.0}}},
                                              {"weight", {core::DType::kBF16, {2}, {1.0, 2.0}}},
                                              {"out", {core::DType::kBF16, {1, 2}, {0.0, 0.0}}},
                                          },
                                          {{"epsilon", 0.0}});
  CHECK(tensors["out"].values[0] == doctest::Approx(3.0 / std::sqrt(12.5)).epsilon(1e-15));
  CHECK(tensors["out"].values[1] == doctest::Approx(8.0 / std::sqrt(12.5)).epsilon(1e-15));
}
