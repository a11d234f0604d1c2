// Resolving the `model` field (model_option.hpp).
#include "env/model_option.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <vector>

namespace crucible::env {
namespace {

core::Error invalid(const std::string& why) {
  return core::Error{core::ErrorCode::kInvalidArgument, "field 'model': " + why};
}

// Model files under home/models that name a model (the program files they include do not).
std::vector<std::filesystem::path> model_files(const std::filesystem::path& home) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(home / "models", ec)) {
    if (entry.path().extension() == ".toml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

core::Value ModelRequest::to_value() const {
  core::Value out{{"name", model->name}, {"variables", variables}};
  if (hidden_states) out["hidden_states"] = true;
  return out;
}

core::Result<std::shared_ptr<const model::Model>> ModelCatalog::load(const std::string& name) {
  std::lock_guard lock(mutex_);
  if (const auto it = loaded_.find(name); it != loaded_.end()) return it->second;
  const bool plain =
      !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      });
  std::string known;
  for (const auto& file : model_files(registry_.home())) {
    auto model = model::load_model(file, registry_);
    if (!model) continue;  // a program file, not a model
    if (plain && (model->name == name || file.stem() == name)) {
      auto shared = std::make_shared<const model::Model>(std::move(model).value());
      loaded_[name] = shared;
      return shared;
    }
    known += (known.empty() ? "" : ", ") + model->name;
  }
  return invalid("no model '" + name.substr(0, 64) + "' on this server (models: " +
                 (known.empty() ? std::string("none") : known) + ")");
}

core::Result<ModelRequest> ModelCatalog::resolve(const core::Value& field,
                                                 const tasks::Task& task) {
  std::string name;
  std::map<std::string, std::int64_t> given;
  bool hidden_states = false;
  if (field.is_string()) {
    name = field.get<std::string>();
  } else if (field.is_object()) {
    const auto it = field.find("name");
    if (it == field.end() || !it->is_string()) return invalid("a map needs a string 'name'");
    name = it->get<std::string>();
    for (const auto& [key, value] : field.items()) {
      if (key == "name") continue;
      if (key == "hidden_states") {
        if (!value.is_boolean()) return invalid("'hidden_states' must be true or false");
        hidden_states = value.get<bool>();
        continue;
      }
      if (!value.is_number_integer() || value.get<std::int64_t>() <= 0) {
        return invalid("variable '" + key.substr(0, 64) + "' must be a positive integer");
      }
      given[key] = value.get<std::int64_t>();
    }
  } else {
    return invalid("must be a model name or a map {name, variables...}");
  }
  auto model = load(name);
  if (!model) return model.error();
  const model::Model& m = **model;
  const bool calls = std::any_of(m.calls.begin(), m.calls.end(),
                                 [&](const model::Call& call) { return call.task == &task; });
  if (!calls) return invalid("model " + m.name + " never calls " + task.id);
  ModelRequest request;
  request.model = *model;
  request.file = m.file.filename().string();
  request.variables = m.defaults;
  for (const auto& [key, value] : given) request.variables[key] = value;
  request.hidden_states = hidden_states;
  auto expanded = model::expand_step(m, request.variables);
  if (!expanded) return invalid(expanded.error().message);
  // The rows returned: each sequence's last token.
  constexpr std::int64_t kMaxHiddenValues = std::int64_t{1} << 20;
  if (hidden_states &&
      expanded->first.at("num_seqs") * expanded->first.at("hidden") > kMaxHiddenValues) {
    return invalid("hidden_states returns at most 2^20 values (num_seqs * hidden)");
  }
  return request;
}

}  // namespace crucible::env
