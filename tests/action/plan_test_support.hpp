// Shared fixtures for the launch-plan suites: an rms_norm-like task context and a plan printer.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "action/launch_plan.hpp"

namespace crucible::action::testing {

// vLLM rms_norm(out, input, weight, epsilon) over [num_tokens, hidden_size].
inline PlanContext rms_norm_context() {
  PlanContext context;
  context.tensors = {
      {"out", core::DType::kBF16}, {"input", core::DType::kBF16}, {"weight", core::DType::kBF16}};
  context.scalars = {{"epsilon", core::DType::kF32}};
  context.symbols = {"num_tokens", "hidden_size"};
  context.tensor_shapes = {
      {"num_tokens", "hidden_size"}, {"num_tokens", "hidden_size"}, {"hidden_size"}};
  return context;
}

// `source`'s directives parsed against rms_norm_context(); the test fails if they do not parse.
inline LaunchPlan parse(const std::string& source) {
  auto plan = parse_launch_plan(source, rms_norm_context());
  REQUIRE_MESSAGE(plan.ok(), plan.error().message);
  return std::move(plan).value();
}

// rms_norm_context()'s symbol values for one case.
inline std::map<std::string, std::int64_t> shape(std::int64_t num_tokens,
                                                 std::int64_t hidden_size) {
  return {{"num_tokens", num_tokens}, {"hidden_size", hidden_size}};
}

inline std::string dims_text(const Dim3Expr& dims) {
  if (!dims.is_dim3) return dims.x.text();
  return "dim3(" + dims.x.text() + ", " + dims.y.text() + ", " + dims.z.text() + ")";
}

// One line per launch, workspace and cluster, e.g.
//   "@2 k<float, 4><<<num_tokens; 256; 0>>>(out:t0 epsilon:s0 hidden_size:y1)"
inline std::string describe(const LaunchPlan& plan) {
  std::string out;
  for (const Launch& launch : plan.launches) {
    out += "@" + std::to_string(launch.line) + " ";
    if (launch.condition) out += "if (" + launch.condition->text() + ") ";
    out += launch.name_expression + "<<<" + dims_text(launch.grid) + "; " +
           dims_text(launch.block) + "; " + launch.smem_bytes.text() + ">>>(";
    for (std::size_t i = 0; i < launch.args.size(); ++i) {
      const auto& arg = launch.args[i];
      const char kind = arg.kind == ArgKind::kTensor      ? 't'
                        : arg.kind == ArgKind::kScalar    ? 's'
                        : arg.kind == ArgKind::kSymbol    ? 'y'
                        : arg.kind == ArgKind::kWorkspace ? 'w'
                                                          : 'm';
      out += (i ? " " : "") + arg.name + ":" + kind + std::to_string(arg.index);
    }
    out += ")";
    if (launch.cluster) out += " cluster#" + std::to_string(*launch.cluster);
    out += "\n";
  }
  for (const Workspace& workspace : plan.workspaces) {
    out += "@" + std::to_string(workspace.line) + " workspace " + workspace.name + " " +
           workspace.type + "/" + std::to_string(workspace.element_bytes) + "[" +
           workspace.count.text() + "]\n";
  }
  for (const Cluster& cluster : plan.clusters) {
    out += "@" + std::to_string(cluster.line) + " cluster " + cluster.kernel + " " +
           dims_text(cluster.dims) + "\n";
  }
  const auto list = [](const std::vector<core::Expr>& exprs) {
    std::string text;
    for (const auto& expr : exprs) text += (text.empty() ? "" : ", ") + expr.text();
    return "(" + text + ")";
  };
  for (const TensorMap& map : plan.tensor_maps) {
    out += "@" + std::to_string(map.line) + " tensormap " + map.name + " t" +
           std::to_string(map.tensor) + " dims" + list(map.dims) + " box" + list(map.box);
    if (!map.strides.empty()) out += " strides" + list(map.strides);
    out += " swizzle" + std::to_string(map.swizzle) + "\n";
  }
  return out;
}

}  // namespace crucible::action::testing
