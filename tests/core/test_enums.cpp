// Round trips of every enum's wire name.
#include <doctest/doctest.h>

#include "core/dtype.hpp"
#include "core/protocol.hpp"
#include "core/result.hpp"
#include "core/step_status.hpp"

using namespace crucible::core;

TEST_CASE("enums: every error code, status, op and dtype round-trips through its name") {
  for (int i = 0; i <= static_cast<int>(ErrorCode::kTimeout); ++i) {
    const auto code = static_cast<ErrorCode>(i);
    CHECK(error_code_from_name(error_code_name(code)) == code);
  }
  for (int i = 0; i <= static_cast<int>(StepStatus::kInfraError); ++i) {
    const auto status = static_cast<StepStatus>(i);
    CHECK(step_status_from_name(step_status_name(status)) == status);
  }
  for (int i = 0; i <= static_cast<int>(Op::kStats); ++i) {
    const auto op = static_cast<Op>(i);
    CHECK(op_from_name(op_name(op)) == op);
  }
  for (int i = 0; i <= static_cast<int>(DType::kBool); ++i) {
    const auto dtype = static_cast<DType>(i);
    CHECK(dtype_from_name(dtype_name(dtype)) == dtype);
  }
  CHECK(dtype_size(DType::kBF16) == 2);
  CHECK(dtype_size(DType::kFP8E4M3) == 1);
  CHECK(dtype_cuda_type(DType::kBF16) == "__nv_bfloat16");
  CHECK_FALSE(error_code_from_name("nonsense").has_value());
  CHECK_FALSE(step_status_from_name("OK").has_value());
}
