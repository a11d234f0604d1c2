// The llm/linear oracle on hand-computed products and the task's cases: the weight layout is
// nn.Linear's ([out_features, in_features], one row per output), and the library contract of the
// manifest holds.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tasks/oracle.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

const std::string kTask = "llm/linear";

std::vector<double> product(std::int64_t tokens, std::int64_t k, std::int64_t n,
                            std::vector<double> input, std::vector<double> weight) {
  oracle_test::Tensors tensors{
      {"out",
       {core::DType::kBF16,
        {tokens, n},
        std::vector<double>(static_cast<std::size_t>(tokens * n))}},
      {"input", {core::DType::kBF16, {tokens, k}, std::move(input)}},
      {"weight", {core::DType::kBF16, {n, k}, std::move(weight)}},
  };
  return oracle_test::call_oracle(kTask,
                                  {{"num_tokens", tokens}, {"in_features", k}, {"out_features", n}},
                                  std::move(tensors))
      .at("out")
      .values;
}

}  // namespace

TEST_CASE("linear oracle: out = input @ weight^T with the weight's rows as output features") {
  // input [[1, 2, 3], [4, 5, 6]]; weight rows (1, 0, 0), (0, 1, 1), (1, -1, 0.5), (2, 2, 2).
  const auto out = product(2, 3, 4, {1, 2, 3, 4, 5, 6}, {1, 0, 0, 0, 1, 1, 1, -1, 0.5, 2, 2, 2});
  const std::vector<double> want{1, 5, 0.5, 12, 4, 11, 2, 30};
  CHECK(out == want);
}

TEST_CASE("linear oracle: an identity weight returns the input, a zero row gives zeros") {
  std::vector<double> input{0.5, -1.25, 3, 7, 1e-3, -2};
  std::vector<double> weight(3 * 3, 0.0);
  weight[0] = weight[4] = 1.0;  // rows 0 and 1 pick features 0 and 1; row 2 is zero
  const auto out = product(2, 3, 3, input, weight);
  const std::vector<double> want{0.5, -1.25, 0, 7, 1e-3, 0};
  CHECK(out == want);
}

TEST_CASE("linear oracle: the threaded path (large products) agrees with a direct sum") {
  // 64 x 64 x 4096 = 2^24 multiply-adds: rows are shared out among threads.
  const std::int64_t tokens = 64, k = 4096, n = 64;
  std::vector<double> input(static_cast<std::size_t>(tokens * k)),
      weight(static_cast<std::size_t>(n * k));
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<double>(i % 7) - 3.0;
  for (std::size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<double>(i % 5) * 0.25;
  const auto out = product(tokens, k, n, input, weight);
  for (const std::int64_t t : {std::int64_t{0}, std::int64_t{17}, tokens - 1}) {
    for (const std::int64_t j : {std::int64_t{0}, std::int64_t{31}, n - 1}) {
      double sum = 0.0;
      for (std::int64_t i = 0; i < k; ++i) {
        sum += input[static_cast<std::size_t>(t * k + i)] *
               weight[static_cast<std::size_t>(j * k + i)];
      }
      CHECK(out[static_cast<std::size_t>(t * n + j)] == sum);
    }
  }
}

TEST_CASE("linear: the task is computed by cuBLASLt and states its contract's shapes") {
  const tasks::Task& task = oracle_test::repository_task(kTask);
  CHECK(task.reference_library == "cublaslt");
  CHECK(task.reference_path == "kernels/llm/linear.cu");
  REQUIRE(task.tensors.size() == 3);
  CHECK(task.tensors[0].name == "out");
  CHECK(task.tensors[1].name == "input");
  CHECK(task.tensors[2].name == "weight");
  for (const auto& c : task.cases) {
    CAPTURE(c.name);
    // Rows 16-byte aligned, as the description promises.
    CHECK(c.symbols.at("in_features") % 8 == 0);
    CHECK(c.symbols.at("out_features") % 8 == 0);
  }
}
