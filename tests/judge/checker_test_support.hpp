// What the task checkers' tests share: reading their reports.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "judge/compare.hpp"

namespace crucible::testing {

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline bool all_pass(const std::vector<judge::CompareReport>& reports) {
  return std::all_of(reports.begin(), reports.end(), [](const auto& r) { return r.pass; });
}

}  // namespace crucible::testing
