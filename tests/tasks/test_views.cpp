// What agents are shown: everything they need, never a hidden case or a seed.
#include <doctest/doctest.h>

#include <functional>

#include "core/msgpack_codec.hpp"
#include "tasks/format.hpp"
#include "tasks/registry.hpp"

using namespace crucible;
using namespace crucible::tasks;

namespace {

const Registry& registry() {
  static const Registry loaded = Registry::load(CRUCIBLE_SOURCE_DIR).value();
  return loaded;
}

const Task& rms_norm() {
  const Task* task = registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  return *task;
}

// Calls `visit` on every key of every map inside `value`.
void for_each_key(const core::Value& value, const std::function<void(const std::string&)>& visit) {
  if (value.is_object()) {
    for (const auto& [key, child] : value.items()) {
      visit(key);
      for_each_key(child, visit);
    }
  } else if (value.is_array()) {
    for (const auto& child : value) for_each_key(child, visit);
  }
}

}  // namespace

TEST_CASE("agent view: shows the visible cases with their shapes and weights") {
  const core::Value view = agent_view(rms_norm());
  REQUIRE(view["cases"].size() == 5);
  CHECK(view["cases"][0]["name"] == "decode_1");
  CHECK(view["cases"][0]["symbols"]["num_tokens"] == 1);
  CHECK(view["cases"][0]["symbols"]["hidden_size"] == 4096);
  CHECK(view["cases"][0]["weight"].get<double>() > 0.0);
  CHECK(view["cases"][0]["scalars"]["epsilon"].get<double>() == doctest::Approx(1e-5));
  CHECK(view["cases"][0]["roofline"]["bytes"] == 24576);
  CHECK(view["cases"][0]["values"]["input"]["generator"] == "randn");
}

TEST_CASE("agent view: carries the description, tensors, tolerances, reference and launch note") {
  const Task& task = rms_norm();
  const core::Value view = agent_view(task);
  for (const char* key :
       {"id", "category", "module", "title", "description", "symbols", "tensors", "scalars",
        "arguments", "tolerance_defaults", "roofline", "reference", "launch", "cases"}) {
    CAPTURE(key);
    CHECK(view.contains(key));
  }
  CHECK(view["reference"]["source"] == task.reference_source);
  CHECK(view["tensors"][0]["name"] == "out");
  CHECK(view["tensors"][0]["role"] == "out");
  CHECK(view["tensors"][0]["dtype"] == "bf16");
  CHECK(view["tensors"][0]["shape"] == core::Value({"num_tokens", "hidden_size"}));
  CHECK(view["tensors"][0].contains("tolerance"));
  CHECK(view["arguments"][1]["c_type"] == "const __nv_bfloat16*");
  CHECK(view["arguments"][3]["c_type"] == "float");
  CHECK(view["arguments"][4]["name"] == "num_tokens");
  CHECK(view["arguments"][4]["c_type"] == "int32_t");
  CHECK(view["launch"].get<std::string>().find("@launch") != std::string::npos);
}

TEST_CASE("agent view: never contains a hidden case, a seed or a server path") {
  const Task& task = rms_norm();
  const core::Value view = agent_view(task);
  const std::string text = core::to_json_text(view);
  for (const Case* hidden : task.hidden_cases()) {
    CAPTURE(hidden->name);
    CHECK(text.find(hidden->name) == std::string::npos);
    REQUIRE(hidden->seed.has_value());
    CHECK(text.find(std::to_string(*hidden->seed)) == std::string::npos);
  }
  for_each_key(view, [](const std::string& key) {
    CAPTURE(key);
    CHECK(key != "seed");
    CHECK(key != "hidden");
    CHECK(key != "file");
    CHECK(key != "manifest");
  });
  CHECK(text.find(task.manifest_path.string()) == std::string::npos);
  // The view must survive the wire.
  CHECK(core::decode_msgpack(core::encode_msgpack(view), core::DecodeLimits{}).ok());
}

TEST_CASE("full view: includes hidden cases and their seeds for logs") {
  const core::Value view = full_view(rms_norm());
  CHECK(view["cases"].size() == rms_norm().cases.size());
  bool saw_hidden = false;
  for (const auto& c : view["cases"]) {
    if (c["name"] == "h_tokens_333") {
      saw_hidden = true;
      CHECK(c["hidden"] == true);
      CHECK(c["seed"] == 9002);
    }
  }
  CHECK(saw_hidden);
}

TEST_CASE("task summary: is exactly id, category, module and title") {
  const core::Value summary = task_summary(rms_norm());
  CHECK(summary.size() == 4);
  CHECK(summary["id"] == "llm/rms_norm");
  CHECK(summary["category"] == "llm");
  CHECK(summary["module"] == rms_norm().module);
  CHECK(summary["title"] == rms_norm().title);
}

TEST_CASE("format: the task table lists every task with its case counts and the module") {
  const std::string table = format_task_table(registry());
  CHECK(table.rfind("ID", 0) == 0);
  CHECK(table.find("llm/rms_norm") != std::string::npos);
  CHECK(table.find("vllm._C.rms_norm(out, input, weight, epsilon)") != std::string::npos);
  CHECK(table.find("5+14 hidden") != std::string::npos);
  CHECK(table.find(std::to_string(registry().all().size()) + " task") != std::string::npos);
  // The LLM family: ten production ops, each row naming the module it mirrors.
  for (const char* id :
       {"llm/rms_norm", "llm/fused_add_rms_norm", "llm/silu_and_mul", "llm/rotary_embedding",
        "llm/topk_softmax", "llm/grouped_topk", "llm/reshape_and_cache_flash",
        "llm/paged_decode_attention", "llm/dynamic_per_token_scaled_fp8_quant", "llm/linear"}) {
    CAPTURE(id);
    const tasks::Task* task = registry().find(id);
    REQUIRE(task != nullptr);
    const auto row = table.find(std::string(id) + " ");
    REQUIRE(row != std::string::npos);
    const auto line = table.substr(row, table.find('\n', row) - row);
    CHECK(line.find(task->module) != std::string::npos);
  }
}

TEST_CASE("format: a library reference shows as timed, with its starting point") {
  const tasks::Task* linear = registry().find("llm/linear");
  REQUIRE(linear != nullptr);
  const std::string details = format_task_details(*linear);
  CHECK(details.find("reference: cublaslt (timed); starting point kernels/llm/linear.cu") !=
        std::string::npos);
  const auto view = agent_view(*linear);
  CHECK(view["reference"]["library"].get<std::string>() == "cublaslt");
  CHECK(view["reference"]["path"].get<std::string>() == "kernels/llm/linear.cu");
}

TEST_CASE("format: task details show the visible cases; --all adds the hidden ones") {
  const std::string shown = format_task_details(rms_norm());
  CHECK(shown.find("decode_1") != std::string::npos);
  CHECK(shown.find("h_tokens_1023") == std::string::npos);
  CHECK(shown.find("(tasks show --all lists them)") != std::string::npos);
  const std::string details = format_task_details(rms_norm(), true);
  for (const char* needle :
       {"llm/rms_norm", "vllm._C.rms_norm", "kernels/llm/rms_norm.cu", "num_tokens", "weight",
        "elementwise against the reference", "epsilon", "2 * num_tokens", "decode_1",
        "h_tokens_1023", "hidden", "floor 13.98 us"}) {
    CAPTURE(needle);
    CHECK(details.find(needle) != std::string::npos);
  }
}
