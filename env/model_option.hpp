// The `model` field of reset and score (docs/protocol.md, "The model check"): the model step a
// candidate is also judged in. The server resolves it against the models under its home
// (models/*.toml), loaded once each, before the step is queued, so a bad field is a clear error
// reply and never a failed step.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/result.hpp"
#include "core/value.hpp"
#include "model/model.hpp"
#include "tasks/registry.hpp"

namespace crucible::env {

// A resolved request: the model, the file the runner loads (under models/) and every variable.
struct ModelRequest {
  std::shared_ptr<const model::Model> model;
  std::string file;
  std::map<std::string, std::int64_t> variables;
  bool hidden_states = false;  // return the reference step's final hidden states (last tokens)

  core::Value to_value() const;  // {name, variables}, as replies and records show it
};

class ModelCatalog {
 public:
  explicit ModelCatalog(const tasks::Registry& registry) : registry_(registry) {}

  // `field` is a model name ("llama3_8b") or a map {name, <variable>: value...,
  // hidden_states: bool}; variables not given take the model's [defaults]. Errors
  // (kInvalidArgument): an unknown model (the known ones listed), a task the model never calls, a
  // variable the model does not have or that is not a positive integer, a step that does not
  // expand. Thread-safe.
  core::Result<ModelRequest> resolve(const core::Value& field, const tasks::Task& task);

 private:
  core::Result<std::shared_ptr<const model::Model>> load(const std::string& name);

  const tasks::Registry& registry_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const model::Model>> loaded_;
};

}  // namespace crucible::env
