// Driver error text and the sticky-error classification.
#include "runner/child/cuda_check.hpp"

namespace crucible::runner::child {

std::string cuda_error_text(CUresult code) {
  const char* name = nullptr;
  const char* text = nullptr;
  cuGetErrorName(code, &name);
  cuGetErrorString(code, &text);
  std::string out =
      name != nullptr ? name : ("CUDA error " + std::to_string(static_cast<int>(code)));
  if (text != nullptr) out += std::string(" (") + text + ")";
  return out;
}

bool is_sticky(CUresult code) {
  switch (code) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

CudaFailure::CudaFailure(CUresult code, const std::string& what)
    : std::runtime_error(what + ": " + cuda_error_text(code)), code_(code) {}

bool CudaFailure::sticky() const { return is_sticky(code_); }

void check(CUresult code, const char* what) {
  if (code != CUDA_SUCCESS) throw CudaFailure(code, what);
}

}  // namespace crucible::runner::child
