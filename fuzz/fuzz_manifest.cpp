// Fuzz target: tasks::load_manifest on task.toml text, then what the registry and the server do
// with an accepted task (captured values, roofline, views, generated values, reference plan).
// Input: the text of one task.toml. load_manifest reads a path, so the text is written into a
// scratch home (under $TMPDIR) whose tasks/ holds a folder per task of the repository (its files
// but task.toml linked), with tasks/capture/ and kernels/ linked from the repository: a manifest
// whose id names one of them is written to that folder, so the id check passes and its
// references resolve as in the repository; any other goes to tasks/llm/fuzz/. Findings: any crash,
// leak, UB or uncaught exception; an error line that is not valid UTF-8; an accepted task whose
// roofline does not evaluate or whose views do not encode.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "action/launch_plan.hpp"
#include "action/plan_context.hpp"
#include "core/msgpack_codec.hpp"
#include "fuzz/fuzz_checks.hpp"
#include "tasks/generators.hpp"
#include "tasks/manifest.hpp"
#include "tasks/registry.hpp"
#include "tasks/roofline.hpp"

namespace {

namespace core = crucible::core;
namespace fuzz = crucible::fuzz;
namespace fs = std::filesystem;
namespace action = crucible::action;
namespace tasks = crucible::tasks;

constexpr std::string_view kDefaultFolder = "llm/fuzz";

struct ScratchHome {
  fs::path root;
  std::vector<std::string> task_ids;  // folders under tasks/ a manifest may be written to

  ~ScratchHome() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

const ScratchHome& scratch_home() {
  static const ScratchHome home = [] {
    const fs::path source(CRUCIBLE_SOURCE_DIR);
    ScratchHome out;
    out.root = fs::temp_directory_path() / ("crucible-fuzz-manifest-" + std::to_string(::getpid()));
    std::error_code ec;
    fs::remove_all(out.root, ec);
    fs::create_directories(out.root / "tasks", ec);
    fs::create_directory_symlink(source / "kernels", out.root / "kernels", ec);
    fs::create_directory_symlink(source / "tasks" / "capture", out.root / "tasks" / "capture", ec);
    if (ec) fuzz::fail("cannot set up the scratch home", ec.message());
    for (fs::recursive_directory_iterator it(source / "tasks", ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->path().filename() != "task.toml") continue;
      const fs::path folder = it->path().parent_path().lexically_relative(source / "tasks");
      out.task_ids.push_back(folder.generic_string());
    }
    // Each real task's folder, its files (parity module, solution, ...) linked but task.toml.
    for (const auto& id : out.task_ids) {
      fs::create_directories(out.root / "tasks" / id, ec);
      for (fs::directory_iterator it(source / "tasks" / id, ec), end; !ec && it != end;
           it.increment(ec)) {
        if (it->path().filename() == "task.toml") continue;
        fs::create_symlink(it->path(), out.root / "tasks" / id / it->path().filename(), ec);
      }
    }
    out.task_ids.emplace_back(kDefaultFolder);
    fs::create_directories(out.root / "tasks" / kDefaultFolder, ec);
    if (ec) fuzz::fail("cannot set up the scratch home", ec.message());
    return out;
  }();
  return home;
}

// The folder for `text`: the one its first `id = "..."` line names, when that is a known task.
std::string_view folder_for(std::string_view text, const ScratchHome& home) {
  constexpr std::string_view kKey = "id = \"";
  std::size_t at = text.rfind(kKey, 0) == 0 ? 0 : text.find("\nid = \"");
  if (at == std::string_view::npos) return kDefaultFolder;
  at = text.find('"', at) + 1;
  const std::size_t end = text.find('"', at);
  if (end == std::string_view::npos) return kDefaultFolder;
  const std::string_view id = text.substr(at, end - at);
  const auto known = std::find(home.task_ids.begin(), home.task_ids.end(), id);
  return known == home.task_ids.end() ? kDefaultFolder : std::string_view(*known);
}

// What the registry and a step do with an accepted task, each on a small slice.
void use_task(const tasks::Task& task) {
  for (const auto& c : task.cases) {
    const auto cost = tasks::roofline_cost(task, c);
    if (!cost) fuzz::fail("an accepted task's roofline does not evaluate", cost.error().message);
    for (const auto& tensor : task.tensors) {
      const auto count = tasks::element_count(tensor, c);
      if (!count) fuzz::require_utf8(count.error().message, "element_count");
      const auto spec = c.values.find(tensor.name);
      if (spec == c.values.end()) continue;
      if (spec->second.kind == tasks::GeneratorKind::kCaptured) {
        const auto values = tasks::captured_values(spec->second, tensor.dtype);
        if (!values) fuzz::require_utf8(values.error().message, "captured_values");
        continue;
      }
      const std::size_t elements = count ? static_cast<std::size_t>(std::min<std::int64_t>(
                                               std::max<std::int64_t>(*count, 0), 64))
                                         : 1;
      std::vector<std::byte> out(elements * core::dtype_size(tensor.dtype));
      const auto generated =
          tasks::generate_into(spec->second, tensor.dtype, tasks::case_seed(c, 1), out);
      if (!generated) fuzz::require_utf8(generated.error().message, "generate_into");
    }
  }
  core::encode_msgpack(tasks::agent_view(task));
  core::encode_msgpack(tasks::full_view(task));
  const auto context = action::make_plan_context(task);
  const auto plan = action::parse_launch_plan(task.reference_source, context);
  if (!plan) return;
  for (const auto& c : task.cases) {
    const auto concrete = action::evaluate_plan(*plan, c.symbols, context);
    if (!concrete) fuzz::require_utf8(concrete.error().message, "evaluate_plan");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ScratchHome& home = scratch_home();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const fs::path manifest = home.root / "tasks" / folder_for(text, home) / "task.toml";
  {
    std::ofstream file(manifest, std::ios::binary | std::ios::trunc);
    file.write(text.data(), static_cast<std::streamsize>(text.size()));
    if (!file) fuzz::fail("cannot write the scratch manifest", manifest.string());
  }
  std::vector<std::string> errors;
  std::string declared_id;
  const auto task = tasks::load_manifest(manifest, home.root, errors, &declared_id);
  if (task.has_value() != errors.empty()) {
    fuzz::fail("load_manifest returned a task with errors, or neither");
  }
  for (const auto& line : errors) fuzz::require_utf8(line, "load_manifest error");
  if (task) use_task(*task);
  return 0;
}
