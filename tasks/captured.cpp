// Safetensors reader and captured-case loader: every length, offset and count in the file is
// checked before it is used, so a truncated or hostile file is an error value, never a crash.
#include "tasks/captured.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <utility>

#include "core/checksum.hpp"
#include "core/text_file.hpp"

namespace crucible::tasks {
namespace {

using core::DType;
using core::ErrorCode;
using nlohmann::json;

constexpr std::array<std::pair<std::string_view, DType>, 12> kSafetensorsDTypes{{
    {"BF16", DType::kBF16},
    {"F16", DType::kF16},
    {"F32", DType::kF32},
    {"F64", DType::kF64},
    {"F8_E4M3", DType::kFP8E4M3},
    {"F8_E5M2", DType::kFP8E5M2},
    {"I8", DType::kI8},
    {"U8", DType::kU8},
    {"I16", DType::kI16},
    {"I32", DType::kI32},
    {"I64", DType::kI64},
    {"BOOL", DType::kBool},
}};

core::Error invalid(std::string_view label, std::string_view tensor, const std::string& what) {
  std::string message(label);
  if (!tensor.empty()) message += ": tensor '" + std::string(tensor) + "'";
  return core::Error{ErrorCode::kInvalidArgument, message + ": " + what};
}

// Element count of `shape`, or nullopt when a dim is negative or the product overflows int64.
std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<std::int64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string_view bytes_view(const std::vector<std::byte>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// A tensor entry of the header before its bytes are copied.
struct Entry {
  CapturedTensor tensor;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
};

core::Result<Entry> parse_entry(const std::string& name, const json& info, std::string_view label,
                                const SafetensorsLimits& limits, std::uint64_t data_size) {
  if (!info.is_object()) return invalid(label, name, "entry is not a JSON object");
  for (const auto& [key, value] : info.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return invalid(label, name, "unknown field '" + key + "'");
    }
  }
  auto dtype_it = info.find("dtype");
  if (dtype_it == info.end() || !dtype_it->is_string()) {
    return invalid(label, name, "missing string field 'dtype'");
  }
  auto dtype = dtype_from_safetensors_name(dtype_it->get_ref<const std::string&>());
  if (!dtype) {
    return invalid(label, name, "unsupported dtype '" + dtype_it->get<std::string>() + "'");
  }
  Entry entry;
  entry.tensor.name = name;
  entry.tensor.dtype = *dtype;
  auto shape_it = info.find("shape");
  if (shape_it == info.end() || !shape_it->is_array()) {
    return invalid(label, name, "missing array field 'shape'");
  }
  if (shape_it->size() > limits.max_rank) {
    return invalid(label, name, "rank " + std::to_string(shape_it->size()) + " over the limit");
  }
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned() ||
        d.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
      return invalid(label, name, "shape holds something other than a non-negative integer");
    }
    entry.tensor.shape.push_back(d.get<std::int64_t>());
  }
  auto offsets_it = info.find("data_offsets");
  if (offsets_it == info.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned()) {
    return invalid(label, name, "'data_offsets' is not [begin, end] of non-negative integers");
  }
  entry.begin = (*offsets_it)[0].get<std::uint64_t>();
  entry.end = (*offsets_it)[1].get<std::uint64_t>();
  if (entry.begin > entry.end || entry.end > data_size) {
    return invalid(label, name,
                   "data_offsets [" + std::to_string(entry.begin) + ", " +
                       std::to_string(entry.end) + ") outside the " + std::to_string(data_size) +
                       "-byte data section");
  }
  auto numel = checked_numel(entry.tensor.shape);
  const std::uint64_t size = core::dtype_size(*dtype);
  if (!numel || std::uint64_t(*numel) > std::numeric_limits<std::uint64_t>::max() / size) {
    return invalid(label, name, "shape " + shape_text(entry.tensor.shape) + " overflows");
  }
  if (std::uint64_t(*numel) * size != entry.end - entry.begin) {
    return invalid(label, name,
                   "shape " + shape_text(entry.tensor.shape) + " of " +
                       std::string(safetensors_dtype_name(*dtype)) + " needs " +
                       std::to_string(std::uint64_t(*numel) * size) + " bytes, offsets give " +
                       std::to_string(entry.end - entry.begin));
  }
  return entry;
}

}  // namespace

std::int64_t CapturedTensor::numel() const { return checked_numel(shape).value_or(0); }

const CapturedTensor* SafetensorsFile::find(std::string_view name) const {
  for (const CapturedTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const auto& [name, d] : kSafetensorsDTypes) {
    if (d == dtype) return name;
  }
  throw core::InternalError("safetensors_dtype_name: dtype without a safetensors name");
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (const auto& [n, d] : kSafetensorsDTypes) {
    if (n == name) return d;
  }
  return std::nullopt;
}

core::Result<SafetensorsFile> parse_safetensors(std::string_view bytes, std::string_view label,
                                                const SafetensorsLimits& limits) {
  if (bytes.size() < 8) {
    return invalid(
        label, "",
        "only " + std::to_string(bytes.size()) + " bytes, shorter than the 8-byte header length");
  }
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | std::uint8_t(bytes[std::size_t(i)]);
  }
  if (header_len > limits.max_header_bytes) {
    return invalid(label, "",
                   "header length " + std::to_string(header_len) + " over the limit " +
                       std::to_string(limits.max_header_bytes));
  }
  if (header_len > bytes.size() - 8) {
    return invalid(label, "",
                   "header length " + std::to_string(header_len) + " runs past the end of the " +
                       std::to_string(bytes.size()) + "-byte file (truncated?)");
  }
  const std::string_view header_text = bytes.substr(8, header_len);
  const std::string_view data = bytes.substr(8 + header_len);

  // Duplicate keys are legal JSON that the parser would silently collapse; find them here.
  std::string duplicate;
  std::set<std::string> top_keys;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string()) {
      if (!top_keys.insert(parsed.get<std::string>()).second && duplicate.empty()) {
        duplicate = parsed.get<std::string>();
      }
    }
    return true;
  };
  json header = json::parse(header_text.begin(), header_text.end(), on_event, false);
  if (header.is_discarded()) return invalid(label, "", "header is not valid JSON");
  if (!header.is_object()) return invalid(label, "", "header is not a JSON object");
  if (!duplicate.empty()) return invalid(label, duplicate, "name appears twice in the header");

  SafetensorsFile file;
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return invalid(label, "", "__metadata__ is not a JSON object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          return invalid(label, "", "__metadata__ value of '" + key + "' is not a string");
        }
        file.metadata.emplace_back(key, value.get<std::string>());
      }
      continue;
    }
    if (entries.size() >= limits.max_tensors) {
      return invalid(label, "", "more than " + std::to_string(limits.max_tensors) + " tensors");
    }
    auto entry = parse_entry(name, info, label, limits, data.size());
    if (!entry) return entry.error();
    entries.push_back(std::move(entry.value()));
  }

  // The data section is exactly the tensors, back to back: no overlap, no hole, nothing after.
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  for (const Entry& e : entries) {
    if (e.begin < covered) {
      return invalid(label, e.tensor.name,
                     "bytes [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                         ") overlap another tensor");
    }
    if (e.begin > covered) {
      return invalid(label, e.tensor.name,
                     "a hole of " + std::to_string(e.begin - covered) + " bytes precedes it");
    }
    covered = e.end;
  }
  if (covered != data.size()) {
    return invalid(
        label, "",
        std::to_string(data.size() - covered) + " bytes after the last tensor belong to none");
  }
  file.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    const char* src = data.data() + e.begin;
    e.tensor.bytes.resize(e.end - e.begin);
    if (!e.tensor.bytes.empty()) std::memcpy(e.tensor.bytes.data(), src, e.tensor.bytes.size());
    file.tensors.push_back(std::move(e.tensor));
  }
  return file;
}

core::Result<std::shared_ptr<const SafetensorsFile>> cached_safetensors(
    const std::filesystem::path& path) {
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::shared_ptr<const SafetensorsFile>> files;
  std::lock_guard lock(mutex);
  if (const auto it = files.find(path); it != files.end()) return it->second;
  auto file = read_safetensors(path);
  if (!file) return file.error();
  auto shared = std::make_shared<const SafetensorsFile>(std::move(file).value());
  files.emplace(path, shared);
  return shared;
}

core::Result<SafetensorsFile> read_safetensors(const std::filesystem::path& path,
                                               const SafetensorsLimits& limits) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return core::Error{ErrorCode::kIo, "cannot read " + path.string() + ": " + ec.message()};
  if (size > limits.max_file_bytes) {
    return invalid(
        path.string(), "",
        std::to_string(size) + " bytes, over the limit " + std::to_string(limits.max_file_bytes));
  }
  auto bytes = core::read_text_file(path);
  if (!bytes) return bytes.error();
  return parse_safetensors(*bytes, path.string(), limits);
}

const CapturedTensor* CapturedGroup::tensor(std::string_view case_name, std::string_view arg,
                                            bool after) const {
  std::string name = std::string(case_name) + "/" + std::string(arg);
  if (after) name += ".after";
  return file.find(name);
}

core::Result<CapturedGroup> load_captured(const std::filesystem::path& safetensors_path,
                                          const SafetensorsLimits& limits) {
  CapturedGroup group;
  group.path = safetensors_path;
  auto file = read_safetensors(safetensors_path, limits);
  if (!file) return file.error();
  group.file = std::move(file.value());

  std::filesystem::path json_path = safetensors_path;
  json_path.replace_extension(".json");
  const std::string label = json_path.string();
  auto text = core::read_text_file(json_path);
  if (!text) return text.error();
  group.provenance = json::parse(*text, nullptr, false);
  if (group.provenance.is_discarded() || !group.provenance.is_object()) {
    return invalid(label, "", "provenance is not a JSON object");
  }
  const json& prov = group.provenance;
  try {
    group.op = prov.at("op").get<std::string>();
    group.phase = prov.at("phase").get<std::string>();
    if (!prov.at("step").is_null()) group.step = prov.at("step").get<std::int64_t>();
    group.model = prov.at("model").at("name").get<std::string>();
    if (prov.at("file").get<std::string>() != safetensors_path.filename().string()) {
      return invalid(label, "",
                     "provenance describes '" + prov.at("file").get<std::string>() + "', not " +
                         safetensors_path.filename().string());
    }
    std::set<std::string> listed;
    for (const json& c : prov.at("cases")) {
      CapturedCase item;
      item.name = c.at("name").get<std::string>();
      if (!c.at("layer").is_null()) item.layer = c.at("layer").get<std::int64_t>();
      item.point = c.at("point").get<std::string>();
      item.scalars = c.at("scalars");
      for (const json& t : c.at("tensors")) {
        CapturedTensorRecord r;
        r.name = t.at("name").get<std::string>();
        r.arg = t.at("arg").get<std::string>();
        r.role = t.at("role").get<std::string>();
        auto dtype = core::dtype_from_name(t.at("dtype").get<std::string>());
        if (!dtype) return invalid(label, r.name, "unknown dtype in the provenance");
        r.dtype = *dtype;
        r.shape = t.at("shape").get<std::vector<std::int64_t>>();
        r.bytes = t.at("bytes").get<std::uint64_t>();
        r.sha256 = t.at("sha256").get<std::string>();
        if (!listed.insert(r.name).second) {
          return invalid(label, r.name, "listed twice in the provenance");
        }
        const CapturedTensor* found = group.file.find(r.name);
        const std::string where = safetensors_path.string();
        if (found == nullptr) return invalid(where, r.name, "in the provenance, not in the file");
        if (found->dtype != r.dtype) {
          return invalid(where, r.name,
                         "dtype " + std::string(core::dtype_name(found->dtype)) +
                             ", provenance says " + std::string(core::dtype_name(r.dtype)));
        }
        if (found->shape != r.shape) {
          return invalid(
              where, r.name,
              "shape " + shape_text(found->shape) + ", provenance says " + shape_text(r.shape));
        }
        if (found->bytes.size() != r.bytes) {
          return invalid(where, r.name, "byte count differs from the provenance");
        }
        if (core::sha256_hex(bytes_view(found->bytes)) != r.sha256) {
          return invalid(where, r.name, "sha256 of its bytes differs from the provenance");
        }
        item.tensors.push_back(std::move(r));
      }
      group.cases.push_back(std::move(item));
    }
    for (const CapturedTensor& t : group.file.tensors) {
      if (!listed.count(t.name)) {
        return invalid(safetensors_path.string(), t.name, "in the file, not in the provenance");
      }
    }
  } catch (const json::exception& e) {
    return invalid(label, "", std::string("malformed provenance: ") + e.what());
  }
  return group;
}

}  // namespace crucible::tasks
