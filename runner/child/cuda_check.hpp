// Checked CUDA driver calls for the GPU runner: every failure becomes a typed exception.
#pragma once

#include <cuda.h>

#include <stdexcept>
#include <string>

namespace crucible::runner::child {

// A driver call failed. `sticky` errors leave the context unusable: the runner reports and exits.
class CudaFailure : public std::runtime_error {
 public:
  CudaFailure(CUresult code, const std::string& what);
  CUresult code() const { return code_; }
  bool sticky() const;

 private:
  CUresult code_;
};

// "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)"
std::string cuda_error_text(CUresult code);

// Throws CudaFailure naming `what` when `code` is not CUDA_SUCCESS.
void check(CUresult code, const char* what);

// True for errors after which the context must be discarded (faults in kernels, ECC, ...).
bool is_sticky(CUresult code);

}  // namespace crucible::runner::child
