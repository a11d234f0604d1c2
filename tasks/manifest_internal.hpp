// Pieces shared by the files that read a task.toml: the problem list, the typed TOML reader,
// naming helpers for keys and messages, and the section parsers each file provides.
#pragma once

#include <toml++/toml.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/dtype.hpp"
#include "tasks/task.hpp"

namespace crucible::tasks::manifest_detail {

// Collects "<file>: <key>: <message>" lines for one manifest.
class Problems {
 public:
  Problems(std::string file, std::vector<std::string>& errors)
      : file_(std::move(file)), errors_(errors) {}
  void add(std::string_view key, std::string_view message) {
    errors_.push_back(file_ + ": " + std::string(key) + ": " + std::string(message));
    ++count_;
  }
  int count() const { return count_; }

 private:
  std::string file_;
  std::vector<std::string>& errors_;
  int count_ = 0;
};

std::string join(const std::vector<std::string>& items, std::string_view separator = ", ");
// The key path of `key` inside `parent` ("tensors[1].dtype"); `key` alone when `parent` is empty.
std::string child(std::string_view parent, std::string_view key);
// The key path of one element of an array: "tensors[1]".
std::string element(std::string_view array, std::size_t index);
std::string in_quotes(std::string_view text);
// The TOML type of `node` as messages name it: "string", "integer", "table", ...
std::string type_name(const toml::node& node);
std::string number_text(double value);
bool is_identifier(std::string_view name);
// Lower-case path components of ids and case names: [a-z0-9_]+.
bool is_slug(std::string_view name);
// Every dtype name, for "known: ..." hints.
std::string dtype_list();
bool is_integer_dtype(core::DType dtype);

// Reading typed values out of a table, reporting wrong types and missing keys.
class Reader {
 public:
  explicit Reader(Problems& problems) : problems_(problems) {}

  void check_keys(const toml::table& table, std::string_view path,
                  std::initializer_list<std::string_view> known);
  std::optional<std::string> string(const toml::table& table, std::string_view key,
                                    std::string_view path, bool required);
  std::optional<double> number(const toml::table& table, std::string_view key,
                               std::string_view path, bool required);
  std::optional<std::int64_t> integer(const toml::table& table, std::string_view key,
                                      std::string_view path, bool required);
  const toml::table* table(const toml::table& parent, std::string_view key, std::string_view path,
                           bool required);
  const toml::array* array(const toml::table& parent, std::string_view key, std::string_view path,
                           bool required);
  // Elements of an array of tables ([[name]]); a non-table element is reported and skipped.
  std::vector<std::pair<std::size_t, const toml::table*>> tables(const toml::table& parent,
                                                                 std::string_view key,
                                                                 bool required);
  std::optional<core::DType> dtype(const toml::table& table, std::string_view path);

 private:
  Problems& problems_;
};

// Everything the parsing functions share.
struct Context {
  Problems& problems;
  Reader& read;
  std::filesystem::path home;
  std::filesystem::path task_dir;
};

// manifest_generators.cpp: one value-generator table, e.g.
// { generator = "randn", mean = 0.0, std = 1.0 }, for a tensor of `dtype`.
std::optional<GeneratorSpec> parse_generator(Context& ctx, const toml::node& node,
                                             const std::string& path, core::DType dtype);

// manifest_declarations.cpp: what a task declares (symbols, tensors, scalars, tolerances).
void parse_symbols(Context& ctx, const toml::table& root, Task& task);
void parse_tensors(Context& ctx, const toml::table& root, Task& task,
                   const std::set<std::string>& names_in_use);
void parse_tolerance_defaults(Context& ctx, const toml::table& root, Task& task);
// Every output tensor gets its own tolerance or the default for its dtype.
void resolve_tolerances(Context& ctx, const toml::table& root, Task& task);
void parse_scalars(Context& ctx, const toml::table& root, Task& task,
                   const std::set<std::string>& names_in_use);

// manifest_cases.cpp: the visible and hidden cases, checked against the declarations.
void parse_cases(Context& ctx, const toml::table& root, Task& task, std::string_view array,
                 bool hidden, std::map<std::string, std::string>& case_keys);
// A `list` generator feeding a timed (visible) case must repeat whole (see the definition).
void check_list_lengths(Context& ctx, const Task& task);

}  // namespace crucible::tasks::manifest_detail
