// Compile job/result wire forms, the fixed prelude, the cache key and the option allow-list.
#include "sandbox/compile_job.hpp"

#include <cstdint>

#include "core/checksum.hpp"

namespace crucible::sandbox {
namespace {

using core::ErrorCode;
using core::Value;

core::Error bad(const std::string& what) { return core::Error{ErrorCode::kBadRequest, what}; }

int int_field(const Value& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return 0;
  return it->get<int>();
}

void append_field(std::string& out, std::string_view field) {
  const auto size = static_cast<std::uint64_t>(field.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((size >> (8 * i)) & 0xffu));
  out.append(field);
}

Value string_array(const std::vector<std::string>& items) {
  Value array = Value::array();
  for (const auto& item : items) array.push_back(item);
  return array;
}

bool read_string_array(const Value& object, const char* key, std::vector<std::string>* out) {
  auto it = object.find(key);
  if (it == object.end()) return true;
  if (!it->is_array()) return false;
  for (const auto& item : *it) {
    if (!item.is_string()) return false;
    out->push_back(item.get<std::string>());
  }
  return true;
}

}  // namespace

Value KernelResources::to_value() const {
  return Value{{"registers", registers},
               {"spill_store_bytes", spill_store_bytes},
               {"spill_load_bytes", spill_load_bytes},
               {"static_smem_bytes", static_smem_bytes},
               {"local_bytes", local_bytes},
               {"constant_bytes", constant_bytes},
               {"max_threads", max_threads},
               {"barriers", barriers}};
}

core::Result<KernelResources> KernelResources::from_value(const Value& value) {
  if (!value.is_object()) return bad("kernel resources: not a map");
  KernelResources out;
  out.registers = int_field(value, "registers");
  out.spill_store_bytes = int_field(value, "spill_store_bytes");
  out.spill_load_bytes = int_field(value, "spill_load_bytes");
  out.static_smem_bytes = int_field(value, "static_smem_bytes");
  out.local_bytes = int_field(value, "local_bytes");
  out.constant_bytes = int_field(value, "constant_bytes");
  out.max_threads = int_field(value, "max_threads");
  out.barriers = int_field(value, "barriers");
  return out;
}

Value CompileOutput::to_value() const {
  Value kernels_value = Value::object();
  for (const auto& [name, resources] : kernels) kernels_value[name] = resources.to_value();
  Value lowered = Value::object();
  for (const auto& [expression, mangled] : lowered_names) lowered[expression] = mangled;
  return Value{{"status", std::string(core::step_status_name(status))},
               {"log", log},
               {"cubin_bytes", cubin.size()},
               {"lowered_names", lowered},
               {"kernels", kernels_value},
               {"compile_ms", compile_ms},
               {"cache_hit", cache_hit}};
}

Value job_to_wire(const CompileJob& job) {
  Value value{{"op", "compile"},
              {"source", job.source},
              {"name_expressions", string_array(job.name_expressions)},
              {"arch", job.arch},
              {"extra_options", string_array(job.extra_options)}};
  if (!job.test_fault.empty()) value["test_fault"] = job.test_fault;
  return value;
}

core::Result<CompileJob> job_from_wire(const Value& value) {
  if (!value.is_object()) return bad("job: not a map");
  CompileJob job;
  auto source = value.find("source");
  if (source == value.end() || !source->is_string()) return bad("job: source missing");
  job.source = source->get<std::string>();
  auto arch = value.find("arch");
  if (arch != value.end() && arch->is_string()) job.arch = arch->get<std::string>();
  auto fault = value.find("test_fault");
  if (fault != value.end() && fault->is_string()) job.test_fault = fault->get<std::string>();
  if (!read_string_array(value, "name_expressions", &job.name_expressions) ||
      !read_string_array(value, "extra_options", &job.extra_options)) {
    return bad("job: name_expressions and extra_options must be string arrays");
  }
  return job;
}

Value output_to_wire(const CompileOutput& output) {
  Value value = output.to_value();
  value.erase("cubin_bytes");
  value["cubin"] =
      Value::binary_t(std::vector<std::uint8_t>(output.cubin.begin(), output.cubin.end()));
  return value;
}

core::Result<CompileOutput> output_from_wire(const Value& value) {
  if (!value.is_object()) return bad("output: not a map");
  CompileOutput out;
  auto status = value.find("status");
  if (status == value.end() || !status->is_string()) return bad("output: status missing");
  auto parsed = core::step_status_from_name(status->get<std::string>());
  if (!parsed) return bad("output: unknown status");
  out.status = *parsed;
  if (auto log = value.find("log"); log != value.end() && log->is_string()) {
    out.log = log->get<std::string>();
  }
  if (auto cubin = value.find("cubin"); cubin != value.end()) {
    if (!cubin->is_binary()) return bad("output: cubin must be binary");
    const auto& bytes = cubin->get_binary();
    out.cubin.assign(bytes.begin(), bytes.end());
  }
  if (auto lowered = value.find("lowered_names"); lowered != value.end()) {
    if (!lowered->is_object()) return bad("output: lowered_names must be a map");
    for (auto it = lowered->begin(); it != lowered->end(); ++it) {
      if (!it.value().is_string()) return bad("output: lowered name must be a string");
      out.lowered_names[it.key()] = it.value().get<std::string>();
    }
  }
  if (auto kernels = value.find("kernels"); kernels != value.end()) {
    if (!kernels->is_object()) return bad("output: kernels must be a map");
    for (auto it = kernels->begin(); it != kernels->end(); ++it) {
      auto resources = KernelResources::from_value(it.value());
      if (!resources) return resources.error();
      out.kernels[it.key()] = *resources;
    }
  }
  if (auto ms = value.find("compile_ms"); ms != value.end() && ms->is_number()) {
    out.compile_ms = ms->get<double>();
  }
  if (auto hit = value.find("cache_hit"); hit != value.end() && hit->is_boolean()) {
    out.cache_hit = hit->get<bool>();
  }
  return out;
}

const std::string& compile_prelude() {
  // Kept small on purpose: the precompiled header made of it is loaded on every compile,
  // and its load time grows with its size (see docs/sandbox.md for the measurements).
  static const std::string kPrelude =
      "// crucible prelude: headers every solution can use without including them.\n"
      "#pragma once\n"
      "#include <cuda_fp16.h>\n"
      "#include <cuda_bf16.h>\n"
      "#include <cuda_fp8.h>\n"
      "#include <cuda/std/cstdint>\n"
      "// The TMA descriptor a @tensormap argument arrives as (cuda.h's type, which NVRTC cannot\n"
      "// include): declare the parameter `const __grid_constant__ CUtensorMap name`.\n"
      "typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; } CUtensorMap;\n";
  return kPrelude;
}

const std::string& compile_prelude_version() {
  static const std::string kVersion = core::sha256_hex(compile_prelude()).substr(0, 16);
  return kVersion;
}

std::string compile_cache_key(const CompileJob& job, std::string_view toolchain) {
  std::string material = "crucible-compile-key/1";
  append_field(material, compile_prelude_version());
  append_field(material, toolchain);
  append_field(material, job.arch);
  append_field(material, std::to_string(job.extra_options.size()));
  for (const auto& option : job.extra_options) append_field(material, option);
  append_field(material, std::to_string(job.name_expressions.size()));
  for (const auto& name : job.name_expressions) append_field(material, name);
  append_field(material, job.source);
  return core::sha256_hex(material);
}

std::optional<std::string> disallowed_extra_option(const std::vector<std::string>& options) {
  static const char* const kExact[] = {"-lineinfo",
                                       "--generate-line-info",
                                       "-use_fast_math",
                                       "--use_fast_math",
                                       "-w",
                                       "--disable-warnings",
                                       "-restrict",
                                       "--restrict",
                                       "-extra-device-vectorization",
                                       "--extra-device-vectorization",
                                       "-err-no",
                                       "-no-err-no"};
  static const char* const kPrefixes[] = {"-D",
                                          "--define-macro=",
                                          "-U",
                                          "--undefine-macro=",
                                          "-maxrregcount=",
                                          "--maxrregcount=",
                                          "-ftz=",
                                          "--ftz=",
                                          "-prec-div=",
                                          "--prec-div=",
                                          "-prec-sqrt=",
                                          "--prec-sqrt=",
                                          "-fmad=",
                                          "--fmad=",
                                          "-Ofast-compile=",
                                          "--Ofast-compile=",
                                          "-diag-suppress=",
                                          "--diag-suppress=",
                                          "-diag-warn=",
                                          "--diag-warn=",
                                          "-diag-error=",
                                          "--diag-error="};
  for (const auto& option : options) {
    bool allowed = false;
    for (const char* exact : kExact) allowed = allowed || option == exact;
    for (const char* prefix : kPrefixes) {
      allowed = allowed ||
                (option.rfind(prefix, 0) == 0 && option.size() > std::string_view(prefix).size());
    }
    if (!allowed || option.find('\n') != std::string::npos) return option;
  }
  return std::nullopt;
}

}  // namespace crucible::sandbox
