// The real registry under tasks/ loads, and llm/rms_norm says what production does.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tasks/registry.hpp"

using namespace crucible;
using namespace crucible::tasks;

namespace {

const Registry& real_registry() {
  static const Registry registry = [] {
    auto loaded = Registry::load(CRUCIBLE_SOURCE_DIR);
    if (!loaded) FAIL("registry failed to load:\n" << loaded.error().message);
    return std::move(loaded).value();
  }();
  return registry;
}

}  // namespace

TEST_CASE("registry: every manifest in the repository loads without a problem") {
  auto loaded = Registry::load(CRUCIBLE_SOURCE_DIR);
  INFO((loaded ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  CHECK_FALSE(loaded->all().empty());
  CHECK(std::is_sorted(loaded->all().begin(), loaded->all().end(),
                       [](const Task& a, const Task& b) { return a.id < b.id; }));
}

TEST_CASE("registry: every task declares its parity anchors, in a module of its folder") {
  // What bench/gpu/parity.py measures a task's reference against lives in the task: a new task
  // cannot forget it. tests/tasks/test_parity.py checks that the named functions exist.
  for (const Task& task : real_registry().all()) {
    CAPTURE(task.id);
    REQUIRE_MESSAGE(task.parity.has_value(),
                    task.id << ": task.toml has no [parity] table (docs/tasks.md, copy "
                               "tasks/llm/rms_norm's)");
    CHECK_FALSE(task.parity->anchors.empty());
    CHECK(task.parity->module_path.parent_path() == task.folder());
    CHECK(std::filesystem::is_regular_file(task.parity->module_path));
  }
}

TEST_CASE("llm/rms_norm: measured against PyTorch's composite and FlashInfer's kernel") {
  const Task* task = real_registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  REQUIRE(task->parity.has_value());
  CHECK(task->parity->module == "parity.py");
  CHECK(task->parity->prepare.empty());
  CHECK(task->parity->check == "check");
  REQUIRE(task->parity->anchors.size() == 2);
  CHECK(task->parity->anchors[0].kind == ParityKind::kComposite);
  CHECK(task->parity->anchors[0].function == "rms_norm");
  CHECK(task->parity->anchors[1].kind == ParityKind::kKernel);
  CHECK(task->parity->anchors[1].function == "flashinfer_rmsnorm");
}

TEST_CASE(
    "llm/paged_decode_attention: measured against FlashAttention-2, efficient attention and "
    "FlashInfer's decode and TensorRT-LLM's XQA") {
  const Task* task = real_registry().find("llm/paged_decode_attention");
  REQUIRE(task != nullptr);
  REQUIRE(task->parity.has_value());
  CHECK(task->parity->prepare == "prepare");
  CHECK(task->parity->check == "check");
  std::vector<std::string> names;
  for (const auto& anchor : task->parity->anchors) {
    CHECK(anchor.kind == ParityKind::kKernel);
    names.push_back(anchor.name);
  }
  CHECK(names == std::vector<std::string>{
                     "FlashAttention-2 varlen", "memory-efficient attention (kv heads repeated)",
                     "FlashInfer paged decode", "FlashInfer paged decode (tensor cores)",
                     "TensorRT-LLM XQA (FlashInfer)"});
}

TEST_CASE("registry: find returns the task by id and nullptr for an unknown id") {
  const auto& registry = real_registry();
  REQUIRE(registry.find("llm/rms_norm") != nullptr);
  CHECK(registry.find("llm/rms_norm")->id == "llm/rms_norm");
  CHECK(registry.find("llm/rms") == nullptr);
  CHECK(registry.find("") == nullptr);
}

TEST_CASE("registry: a home without a tasks folder is an io error") {
  auto loaded = Registry::load(std::filesystem::path(CRUCIBLE_SOURCE_DIR) / "core");
  REQUIRE_FALSE(loaded.ok());
  CHECK(loaded.error().code == core::ErrorCode::kIo);
}

TEST_CASE("llm/rms_norm: mirrors vLLM rms_norm(out, input, weight, epsilon) on bf16") {
  const Task* task = real_registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  CHECK(task->category == "llm");
  CHECK(task->module == "vllm._C.rms_norm(out, input, weight, epsilon)");
  CHECK(task->symbols == std::vector<std::string>{"num_tokens", "hidden_size"});

  REQUIRE(task->tensors.size() == 3);
  const auto& out = task->tensors[0];
  const auto& input = task->tensors[1];
  const auto& weight = task->tensors[2];
  CHECK(out.name == "out");
  CHECK(out.role == Role::kOut);
  CHECK(out.dtype == core::DType::kBF16);
  CHECK(out.shape == std::vector<std::string>{"num_tokens", "hidden_size"});
  REQUIRE(out.tolerance.has_value());
  CHECK(out.tolerance->atol > 0.0);
  CHECK(out.tolerance->rtol > 0.0);
  CHECK_FALSE(out.values.has_value());
  CHECK(input.name == "input");
  CHECK(input.role == Role::kIn);
  CHECK(input.shape == std::vector<std::string>{"num_tokens", "hidden_size"});
  CHECK(weight.name == "weight");
  CHECK(weight.shape == std::vector<std::string>{"hidden_size"});
  REQUIRE(weight.values.has_value());
  CHECK(weight.values->mean == doctest::Approx(1.0));

  REQUIRE(task->scalars.size() == 1);
  CHECK(task->scalars[0].name == "epsilon");
  CHECK(task->scalars[0].dtype == core::DType::kF32);
  CHECK(task->scalars[0].default_value == doctest::Approx(1e-5));

  CHECK(task->reference_path == "kernels/llm/rms_norm.cu");
  CHECK(task->reference_source.find(
            "@launch if (num_tokens < 1024) rms_norm_kernel<<<num_tokens, 256>>>(out, input, "
            "weight, epsilon, hidden_size)") != std::string::npos);
  CHECK(task->roofline.bytes == "2 * num_tokens * hidden_size * 2 + hidden_size * 2");
}

TEST_CASE("llm/rms_norm: visible cases are Llama-3-8B decode and prefill, weighted to decode") {
  const Task* task = real_registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  const auto visible = task->visible_cases();
  std::vector<std::int64_t> tokens;
  double decode_weight = 0.0;
  double total_weight = 0.0;
  for (const Case* c : visible) {
    CHECK(c->symbols.at("hidden_size") == 4096);
    CHECK(c->scalars.at("epsilon") == doctest::Approx(1e-5));
    CHECK_FALSE(c->seed.has_value());  // fresh values per episode
    CHECK(c->weight > 0.0);
    tokens.push_back(c->symbols.at("num_tokens"));
    total_weight += c->weight;
    if (c->symbols.at("num_tokens") <= 256) decode_weight += c->weight;
  }
  CHECK(tokens == std::vector<std::int64_t>{1, 7, 32, 256, 4096});
  CHECK(decode_weight / total_weight > 0.7);
}

TEST_CASE("llm/rms_norm: hidden cases cover odd token counts, other widths and fixed seeds") {
  const Task* task = real_registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  std::vector<std::int64_t> tokens;
  std::vector<std::int64_t> widths;
  for (const Case* c : task->hidden_cases()) {
    CHECK(c->hidden);
    CHECK(c->seed.has_value());
    tokens.push_back(c->symbols.at("num_tokens"));
    widths.push_back(c->symbols.at("hidden_size"));
  }
  for (const std::int64_t t : {333, 1023}) {
    CHECK(std::find(tokens.begin(), tokens.end(), t) != tokens.end());
  }
  for (const std::int64_t h : {5120, 8192}) {
    CHECK(std::find(widths.begin(), widths.end(), h) != widths.end());
  }
  const Case* qwen = task->find_case("h_qwen_width_5120");
  REQUIRE(qwen != nullptr);
  CHECK(qwen->scalars.at("epsilon") == doctest::Approx(1e-6));
  const Case* large = task->find_case("h_large_values");
  REQUIRE(large != nullptr);
  CHECK(large->values.at("input").std == doctest::Approx(30.0));
  CHECK(large->values.at("weight").mean == doctest::Approx(1.0));  // the tensor default
}

TEST_CASE("tasks: shapes resolve per case and seeds differ by case, tensor and draw") {
  const Task* task = real_registry().find("llm/rms_norm");
  REQUIRE(task != nullptr);
  const Case* c = task->find_case("decode_7");
  REQUIRE(c != nullptr);
  const auto shape = resolve_shape(task->tensors[1], *c);
  REQUIRE(shape.ok());
  CHECK(*shape == std::vector<std::int64_t>{7, 4096});
  CHECK(*element_count(task->tensors[2], *c) == 4096);

  const Case* other = task->find_case("decode_32");
  REQUIRE(other != nullptr);
  CHECK(case_seed(*c, 1) != case_seed(*c, 2));
  CHECK(case_seed(*c, 1) != case_seed(*other, 1));
  CHECK(case_seed(*c, 1) == case_seed(*c, 1));
  const Case* hidden = task->find_case("h_tokens_333");
  REQUIRE(hidden != nullptr);
  CHECK(case_seed(*hidden, 1) == 9002);
  CHECK(case_seed(*hidden, 2) == 9002);
  const auto seed = case_seed(*c, 1);
  CHECK(tensor_seed(seed, "input") != tensor_seed(seed, "weight"));
  CHECK(tensor_seed(seed, "input", 0) != tensor_seed(seed, "input", 1));
}

TEST_CASE("registry: a task's content hash changes with its manifest or reference, and only then") {
  namespace fs = std::filesystem;
  const fs::path source(CRUCIBLE_SOURCE_DIR);
  const fs::path home = fs::temp_directory_path() / ("crucible_hash_" + std::to_string(::getpid()));
  fs::remove_all(home);
  fs::create_directories(home / "tasks/llm");
  fs::create_directories(home / "kernels/llm");
  fs::copy(source / "tasks/llm/silu_and_mul", home / "tasks/llm/silu_and_mul");
  // Its hidden cases read captured activations (tasks/capture/cases/...).
  fs::create_directories(home / "tasks/capture/cases");
  fs::copy(source / "tasks/capture/cases/stories260K", home / "tasks/capture/cases/stories260K");
  fs::copy_file(source / "kernels/llm/silu_and_mul.cu", home / "kernels/llm/silu_and_mul.cu");
  const auto hash = [&home] {
    auto loaded = Registry::load(home);
    REQUIRE_MESSAGE(loaded.ok(), loaded.error().message);
    return loaded->find("llm/silu_and_mul")->content_hash;
  };
  const std::string first = hash();
  CHECK(first.size() == 64);
  CHECK(first == real_registry().find("llm/silu_and_mul")->content_hash);
  CHECK(hash() == first);  // loading again: the same definition, the same hash
  const auto append = [](const fs::path& path, const char* text) {
    std::ofstream(path, std::ios::app) << text;
  };
  append(home / "kernels/llm/silu_and_mul.cu", "\n// one more line\n");
  const std::string after_reference = hash();
  CHECK(after_reference != first);
  append(home / "tasks/llm/silu_and_mul/task.toml", "\n# a comment\n");
  const std::string after_manifest = hash();
  CHECK(after_manifest != after_reference);
  // The captured values are part of the definition: new bytes there, a new hash.
  append(home / "tasks/capture/cases/stories260K/prefill.silu_and_mul.safetensors", " ");
  CHECK(hash() != after_manifest);
  // Files of the folder that are not the definition (the example solution) do not count.
  const std::string before = hash();
  append(home / "tasks/llm/silu_and_mul/solution.cu", "\n// edited\n");
  CHECK(hash() == before);
  fs::remove_all(home);
}
