// Pieces shared by the directive parser, the structured-plan parser and plan validation.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "action/launch_plan.hpp"
#include "core/expr.hpp"
#include "core/result.hpp"

namespace crucible::action::plan_detail {

core::Error invalid(std::string message);

std::string_view trim(std::string_view text);
bool is_identifier(std::string_view text);
// `name`, `ns::name` or `::ns::name`.
bool is_qualified_name(std::string_view text);
// Collapses runs of spaces and tabs into one space (after trimming).
std::string normalize_spaces(std::string_view text);
// `text` with all spaces and tabs removed, for comparing spellings of one name expression.
std::string without_spaces(std::string_view text);
// "a, b, c"; "none" when empty.
std::string join(const std::vector<std::string>& items);

// The closest candidate within a small edit distance, for "did you mean" hints.
std::optional<std::string> closest(std::string_view word,
                                   const std::vector<std::string>& candidates);

// Parses one expression field; errors read "<where>: <label> '<text>': column 3: ...".
core::Result<core::Expr> parse_field(const std::string& where, std::string_view label,
                                     std::string_view text);

// Bytes of one workspace element for a dtype name or CUDA type spelling (spaces normalized);
// nullopt if the type is unknown.
std::optional<std::size_t> element_bytes(std::string_view type);
// The error for an unknown workspace element type, with a suggestion.
core::Error unknown_element_type(const std::string& where, std::string_view type);

// Checks template-argument text and builds the NVRTC name expression.
core::Result<std::string> name_expression(const std::string& where, std::string_view kernel,
                                          std::string_view template_args);

// One `// @...` comment: its 1-based line and its text from the '@', trailing blanks trimmed.
struct DirectiveLine {
  int line = 0;      // where the directive starts
  std::string text;  // continuation lines joined with single spaces
};
// Finds the directive comments of `source`, skipping block comments and string, character and
// raw-string literals. A directive whose parentheses or `<<<` are still open at the end of its
// line continues on the `//` comment lines right below it (up to kMaxContinuationLines), so a
// long argument list may wrap. Enforces the source-size, directive-count and length caps.
core::Result<std::vector<DirectiveLine>> scan_directives(std::string_view source,
                                                         const PlanLimits& limits);

// Resolves argument names and checks the whole plan against the context: counts, names,
// symbols used in expressions, clusters, and every size that is already a constant.
// `from_directives` selects the wording of the "no launch" message.
core::Result<LaunchPlan> finish_plan(LaunchPlan plan, const PlanContext& context,
                                     bool from_directives);

}  // namespace crucible::action::plan_detail
