// Plain-text task tables and details for the CLI.
#include "tasks/format.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tasks/roofline.hpp"

namespace crucible::tasks {
namespace {

// Left-aligned in a column of `width`; a longer text keeps one space before the next column.
std::string pad(std::string text, std::size_t width) {
  text.append(text.size() < width ? width - text.size() : 1, ' ');
  return text;
}

std::string shape_text(const TensorSpec& tensor) {
  std::string out = "[";
  for (std::size_t i = 0; i < tensor.shape.size(); ++i) {
    if (i != 0) out += ", ";
    out += tensor.shape[i];
  }
  return out + "]";
}

std::string number(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

std::string floor_text(double ns) {
  char buffer[32];
  if (ns >= 1e6) {
    std::snprintf(buffer, sizeof buffer, "%.2f ms", ns / 1e6);
  } else if (ns >= 1e3) {
    std::snprintf(buffer, sizeof buffer, "%.2f us", ns / 1e3);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f ns", ns);
  }
  return buffer;
}

}  // namespace

std::string format_task_table(const Registry& registry) {
  std::size_t id_width = 2;
  for (const auto& task : registry.all()) id_width = std::max(id_width, task.id.size());
  std::ostringstream out;
  out << pad("ID", id_width + 2) << pad("CATEGORY", 10) << pad("CASES", 13) << "MIRRORS\n";
  for (const auto& task : registry.all()) {
    const std::string cases = std::to_string(task.visible_cases().size()) + "+" +
                              std::to_string(task.hidden_cases().size()) + " hidden";
    out << pad(task.id, id_width + 2) << pad(task.category, 10) << pad(cases, 13) << task.module
        << "\n";
  }
  out << registry.all().size() << (registry.all().size() == 1 ? " task\n" : " tasks\n");
  return out.str();
}

std::string symbols_text(const std::map<std::string, std::int64_t>& symbols,
                         std::string_view separator) {
  std::string text;
  for (const auto& [name, value] : symbols) {
    if (!text.empty()) text += separator;
    text += name + "=" + std::to_string(value);
  }
  return text;
}

std::string format_task_details(const Task& task, bool include_hidden) {
  std::ostringstream out;
  out << task.id << " — " << task.title << "\n";
  out << "  mirrors:   " << task.module << "\n";
  out << "  category:  " << task.category << "\n";
  if (task.reference_library.empty()) {
    out << "  reference: " << task.reference_path << "\n";
  } else {
    out << "  reference: " << task.reference_library << " (timed); starting point "
        << task.reference_path << "\n";
  }
  out << "  judged:    "
      << (task.checker.empty() ? std::string("elementwise against the reference")
                               : "by the '" + task.checker + "' checker (every right answer)")
      << "\n";
  // A host path means nothing to an agent; maintainers (--all) get it.
  if (include_hidden) out << "  manifest:  " << task.manifest_path.string() << "\n";
  out << "\n";
  out << task.description;
  if (!task.description.empty() && task.description.back() != '\n') out << "\n";
  out << "\nsymbols\n";
  for (const auto& symbol : task.symbol_specs) {
    out << "  " << pad(symbol.name, 16) << pad(std::string(core::dtype_name(symbol.dtype)), 6)
        << symbol.description << "\n";
  }
  out << "tensors\n";
  for (const auto& tensor : task.tensors) {
    out << "  " << pad(tensor.name, 16) << pad(std::string(role_name(tensor.role)), 7)
        << pad(std::string(core::dtype_name(tensor.dtype)), 6) << pad(shape_text(tensor), 28);
    if (tensor.tolerance) {
      out << "atol " << number(tensor.tolerance->atol) << " rtol "
          << number(tensor.tolerance->rtol);
    } else if (tensor.values) {
      out << describe(*tensor.values);
    }
    out << "\n";
  }
  if (!task.scalars.empty()) {
    out << "scalars\n";
    for (const auto& scalar : task.scalars) {
      out << "  " << pad(scalar.name, 16) << pad(std::string(core::dtype_name(scalar.dtype)), 6);
      if (scalar.default_value) out << "default " << number(*scalar.default_value);
      out << "\n";
    }
  }
  out << "roofline\n  bytes = " << task.roofline.bytes << "\n  flops = " << task.roofline.flops
      << "\n";
  out << (include_hidden ? "cases, hidden ones included (floor = H200 roofline time)\n"
                         : "visible cases (floor = H200 roofline time); hidden: " +
                               std::to_string(task.hidden_cases().size()) +
                               " (tasks show --all lists them)\n");
  for (const auto& c : task.cases) {
    if (c.hidden && !include_hidden) continue;
    out << "  " << pad(c.name, 22) << pad(c.hidden ? "hidden" : "w=" + number(c.weight), 9)
        << pad(symbols_text(c.symbols), 34);
    if (const auto cost = roofline_cost(task, c)) {
      out << "floor " << floor_text(roofline_floor_ns(*cost, kH200Peak));
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace crucible::tasks
