// Registry loading: finds manifests, validates each, checks ids across tasks.
#include "tasks/registry.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <system_error>

#include "core/checksum.hpp"
#include "core/text_file.hpp"
#include "tasks/captured.hpp"
#include "tasks/generators.hpp"
#include "tasks/manifest.hpp"

namespace crucible::tasks {

namespace fs = std::filesystem;

namespace {

// Every captured value a case uses must exist with the tensor's dtype and exactly the case's
// element count: caught when the registry loads, not as an infra_error in the middle of a step.
void check_captured_values(const Task& task, const std::string& shown,
                           std::vector<std::string>& errors) {
  for (const auto& c : task.cases) {
    for (const auto& tensor : task.tensors) {
      const auto spec = c.values.find(tensor.name);
      if (spec == c.values.end() || spec->second.kind != GeneratorKind::kCaptured) continue;
      const std::string where = shown + ": case " + c.name + ": values." + tensor.name + ": ";
      const auto values = captured_values(spec->second, tensor.dtype);
      const auto count = element_count(tensor, c);
      if (!values) {
        errors.push_back(where + values.error().message);
      } else if (const CapturedTensor* captured = values->tensor;
                 count && captured->numel() != *count) {
        errors.push_back(where + "captured tensor '" + spec->second.tensor + "' has " +
                         std::to_string(captured->numel()) + " elements, the case's shape " +
                         std::to_string(*count));
      }
    }
  }
}

// The task's content hash (Task::content_hash): each part as its length and bytes, so no two
// different definitions can produce the same stream.
core::Result<std::string> content_hash(const Task& task) {
  std::string stream;
  const auto add = [&stream](std::string_view label, std::string_view bytes) {
    stream.append(label).append(1, '\0').append(std::to_string(bytes.size()));
    stream.append(1, '\0').append(bytes);
  };
  auto manifest = core::read_text_file(task.manifest_path);
  if (!manifest) return manifest.error();
  add("manifest", *manifest);
  add("reference", task.reference_source);
  std::set<std::filesystem::path> captured;
  for (const auto& c : task.cases) {
    for (const auto& [name, spec] : c.values) {
      if (spec.kind == GeneratorKind::kCaptured) captured.insert(spec.file_path);
    }
  }
  for (const auto& path : captured) {
    auto bytes = core::read_text_file(path);
    if (!bytes) return bytes.error();
    add(path.filename().string(), core::sha256_hex(*bytes));
  }
  return core::sha256_hex(stream);
}

}  // namespace

core::Result<Registry> Registry::load(const fs::path& home) {
  const fs::path root = fs::absolute(home).lexically_normal();
  const fs::path tasks_root = root / "tasks";
  std::error_code ec;
  if (!fs::is_directory(tasks_root, ec)) {
    return core::Error{core::ErrorCode::kIo,
                       "no tasks folder at " + tasks_root.string() +
                           " (is --home / CRUCIBLE_HOME the repository root?)"};
  }
  std::vector<fs::path> manifests;
  fs::recursive_directory_iterator it(tasks_root, fs::directory_options::none, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it->path().filename() == "task.toml" && it->is_regular_file(ec)) {
      manifests.push_back(it->path());
    }
  }
  if (ec) {
    return core::Error{core::ErrorCode::kIo,
                       "cannot list " + tasks_root.string() + ": " + ec.message()};
  }
  std::sort(manifests.begin(), manifests.end());

  Registry registry;
  registry.home_ = root;
  std::vector<std::string> errors;
  std::map<std::string, fs::path> seen;
  for (const auto& manifest : manifests) {
    std::string id;
    auto task = load_manifest(manifest, root, errors, &id);
    if (!id.empty()) {
      const auto [previous, fresh] = seen.emplace(id, manifest);
      if (!fresh) {
        errors.push_back(manifest.lexically_relative(root).generic_string() +
                         ": id: duplicate id '" + id + "' (also in " +
                         previous->second.lexically_relative(root).generic_string() + ")");
        continue;
      }
    }
    if (task) {
      const std::string shown = manifest.lexically_relative(root).generic_string();
      check_captured_values(*task, shown, errors);
      auto hash = content_hash(*task);
      if (!hash) {
        errors.push_back(shown + ": " + hash.error().message);
        continue;
      }
      task->content_hash = std::move(hash).value();
      registry.tasks_.push_back(std::move(*task));
    }
  }
  if (manifests.empty()) errors.push_back("tasks: no task.toml found under " + tasks_root.string());
  if (!errors.empty()) {
    std::string message;
    for (const auto& line : errors) {
      if (!message.empty()) message += '\n';
      message += line;
    }
    return core::Error{core::ErrorCode::kInvalidArgument, std::move(message)};
  }
  std::sort(registry.tasks_.begin(), registry.tasks_.end(),
            [](const Task& a, const Task& b) { return a.id < b.id; });
  return registry;
}

const Task* Registry::find(std::string_view id) const {
  const auto it =
      std::lower_bound(tasks_.begin(), tasks_.end(), id,
                       [](const Task& task, std::string_view key) { return task.id < key; });
  if (it == tasks_.end() || it->id != id) return nullptr;
  return &*it;
}

}  // namespace crucible::tasks
