// `crucible model`: a model step's call sites (show), a candidate's launch plan at every call
// site of its task (plan), and greedy tokens from the step's float64 oracle (generate).
// docs/models.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/result.hpp"
#include "tasks/registry.hpp"

namespace crucible::cli {

// "name=value" pairs (positive integers) into a map; kInvalidArgument naming a bad one.
core::Result<std::map<std::string, std::int64_t>> parse_settings(
    const std::vector<std::string>& settings);

// The call sites of the model's step at `variables`: site, task, calls per step, symbols, and
// each site's share of the step's roofline floor on an H200 (an estimate from the tasks'
// roofline formulas, not a measurement). Returns the exit status; errors go to `err`.
int model_show(const std::filesystem::path& model_file, const tasks::Registry& registry,
               const std::map<std::string, std::int64_t>& variables, std::ostream& out,
               std::ostream& err);

// The launch plan of `source` (a candidate for `task_id`) evaluated at each call site of that
// task: the launches it makes there, or why it cannot run there. Exit 0 when the plan holds at
// every site, 1 when it fails at one, 2 for a usage error.
int model_plan(const std::filesystem::path& model_file, const tasks::Registry& registry,
               const std::string& task_id, const std::string& source,
               const std::map<std::string, std::int64_t>& variables, std::ostream& out,
               std::ostream& err);

// Greedy tokens of a model with llama2.c weights through the step's float64 oracle, from
// `first` (one token a sequence), `count` tokens each.
int model_generate(const std::filesystem::path& home, const std::filesystem::path& model_file,
                   const tasks::Registry& registry, const std::vector<std::int64_t>& first,
                   int count, std::ostream& out, std::ostream& err);

}  // namespace crucible::cli
