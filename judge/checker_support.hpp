// Pieces the task checkers share: finding a tensor by name, reading an element as a double,
// and folding one output's failures into a CompareReport.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "core/numeric.hpp"
#include "judge/compare.hpp"
#include "judge/task_checker.hpp"

namespace crucible::judge {

inline const HostTensorView* find_named(std::span<const HostTensorView> views,
                                        std::string_view name) {
  for (const auto& view : views) {
    if (view.name == name) return &view;
  }
  return nullptr;
}

inline double element_of(const HostTensorView& view, std::size_t index) {
  return core::element_as_double(view.dtype, view.data, index);
}

// The failures of one output folded into a CompareReport; only the first failure's sentence is
// built.
class Failures {
 public:
  Failures(const HostTensorView& view, const Tolerance& tolerance, bool reveal) : view_(view) {
    report_.output_name = std::string(view.name);
    report_.count = view.count;
    report_.tolerance = tolerance;
    report_.values_revealed = reveal;
  }

  template <class Reason>
  void fail(std::size_t index, double got, double expected, bool unwritten, Reason&& reason) {
    if (report_.mismatches == 0) {
      report_.first_mismatch = index;
      report_.first_mismatch_coords = flat_to_coords(index, report_.count, view_.shape);
      report_.first_got = report_.values_revealed ? got : 0.0;
      report_.first_expected = report_.values_revealed ? expected : 0.0;
      first_reason_ = reason();
    }
    ++report_.mismatches;
    if (unwritten) ++report_.unwritten;
  }

  CompareReport finish(const std::string& pass_text, const std::string& rule_text) {
    const std::string head = "output '" + report_.output_name + "': ";
    report_.pass = report_.mismatches == 0;
    report_.summary = report_.pass ? head + pass_text
                                   : head + std::to_string(report_.mismatches) + " of " +
                                         std::to_string(report_.count) + " elements fail (" +
                                         rule_text + "); first: " + first_reason_ + "; " +
                                         std::to_string(report_.unwritten) + " unwritten";
    return report_;
  }

 private:
  const HostTensorView& view_;
  CompareReport report_;
  std::string first_reason_;
};

}  // namespace crucible::judge
