// The typed TOML reader and the naming helpers every part of the manifest reader uses.
#include <algorithm>
#include <cctype>
#include <sstream>

#include "tasks/manifest_internal.hpp"

namespace crucible::tasks::manifest_detail {

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::string child(std::string_view parent, std::string_view key) {
  if (parent.empty()) return std::string(key);
  return std::string(parent) + "." + std::string(key);
}

std::string element(std::string_view array, std::size_t index) {
  return std::string(array) + "[" + std::to_string(index) + "]";
}

std::string in_quotes(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

std::string number_text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

bool is_identifier(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  const auto head = static_cast<unsigned char>(name[0]);
  if (!(std::isalpha(head) || name[0] == '_')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Lower-case path components of ids and case names: [a-z0-9_]+.
bool is_slug(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string dtype_list() {
  std::vector<std::string> names;
  for (int i = 0; i <= static_cast<int>(core::DType::kBool); ++i) {
    names.emplace_back(core::dtype_name(static_cast<core::DType>(i)));
  }
  return join(names);
}

void Reader::check_keys(const toml::table& table, std::string_view path,
                        std::initializer_list<std::string_view> known) {
  for (auto&& [key, node] : table) {
    (void)node;
    if (std::find(known.begin(), known.end(), key.str()) != known.end()) continue;
    std::vector<std::string> names(known.begin(), known.end());
    problems_.add(child(path, key.str()), "unknown key (known: " + join(names) + ")");
  }
}

std::optional<std::string> Reader::string(const toml::table& table, std::string_view key,
                                          std::string_view path, bool required) {
  const toml::node* node = table.get(key);
  if (node == nullptr) {
    if (required) problems_.add(child(path, key), "missing (a string is required)");
    return std::nullopt;
  }
  if (const auto* value = node->as_string()) return value->get();
  problems_.add(child(path, key), "must be a string, got " + type_name(*node));
  return std::nullopt;
}

std::optional<double> Reader::number(const toml::table& table, std::string_view key,
                                     std::string_view path, bool required) {
  const toml::node* node = table.get(key);
  if (node == nullptr) {
    if (required) problems_.add(child(path, key), "missing (a number is required)");
    return std::nullopt;
  }
  if (const auto* value = node->as_floating_point()) return value->get();
  if (const auto* value = node->as_integer()) return static_cast<double>(value->get());
  problems_.add(child(path, key), "must be a number, got " + type_name(*node));
  return std::nullopt;
}

std::optional<std::int64_t> Reader::integer(const toml::table& table, std::string_view key,
                                            std::string_view path, bool required) {
  const toml::node* node = table.get(key);
  if (node == nullptr) {
    if (required) problems_.add(child(path, key), "missing (an integer is required)");
    return std::nullopt;
  }
  if (const auto* value = node->as_integer()) return value->get();
  problems_.add(child(path, key), "must be an integer, got " + type_name(*node));
  return std::nullopt;
}

const toml::table* Reader::table(const toml::table& parent, std::string_view key,
                                 std::string_view path, bool required) {
  const toml::node* node = parent.get(key);
  if (node == nullptr) {
    if (required) problems_.add(child(path, key), "missing (a table is required)");
    return nullptr;
  }
  if (const auto* value = node->as_table()) return value;
  problems_.add(child(path, key), "must be a table, got " + type_name(*node));
  return nullptr;
}

const toml::array* Reader::array(const toml::table& parent, std::string_view key,
                                 std::string_view path, bool required) {
  const toml::node* node = parent.get(key);
  if (node == nullptr) {
    if (required) problems_.add(child(path, key), "missing (an array is required)");
    return nullptr;
  }
  if (const auto* value = node->as_array()) return value;
  problems_.add(child(path, key), "must be an array, got " + type_name(*node));
  return nullptr;
}

// Elements of an array of tables ([[name]]); a non-table element is reported and skipped.
std::vector<std::pair<std::size_t, const toml::table*>> Reader::tables(const toml::table& parent,
                                                                       std::string_view key,
                                                                       bool required) {
  std::vector<std::pair<std::size_t, const toml::table*>> out;
  const toml::array* items = array(parent, key, "", required);
  if (items == nullptr) return out;
  for (std::size_t i = 0; i < items->size(); ++i) {
    const toml::node& node = *items->get(i);
    if (const auto* entry = node.as_table()) {
      out.emplace_back(i, entry);
    } else {
      problems_.add(element(key, i), "must be a table, got " + type_name(node));
    }
  }
  return out;
}

std::optional<core::DType> Reader::dtype(const toml::table& table, std::string_view path) {
  const auto name = string(table, "dtype", path, true);
  if (!name) return std::nullopt;
  const auto dtype = core::dtype_from_name(*name);
  if (!dtype) {
    problems_.add(child(path, "dtype"),
                  "unknown dtype " + in_quotes(*name) + " (known: " + dtype_list() + ")");
  }
  return dtype;
}

bool is_integer_dtype(core::DType dtype) {
  return dtype == core::DType::kI8 || dtype == core::DType::kU8 || dtype == core::DType::kI16 ||
         dtype == core::DType::kI32 || dtype == core::DType::kI64 || dtype == core::DType::kBool;
}

}  // namespace crucible::tasks::manifest_detail
