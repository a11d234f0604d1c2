// The llm/reshape_and_cache_flash oracle on hand-placed slots, on its own task's generated
// cases, and against the stories260K cache writes recorded by tasks/capture.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>

#include "tasks/captured.hpp"
#include "tasks/generators.hpp"
#include "tasks/oracle.hpp"
#include "tasks/registry.hpp"
#include "tests/tasks/oracle_test_support.hpp"

using namespace crucible;

namespace {

using oracle_test::case_named;
using oracle_test::Tensors;

const std::string kTask = "llm/reshape_and_cache_flash";

const tasks::Task& cache_task() { return oracle_test::repository_task(kTask); }

// Runs the oracle on explicit tensors; the cache shape gives the symbols.
void run(Tensors& tensors) {
  const auto& cache = tensors.at("key_cache").shape;
  const auto status = oracle_test::oracle_status(kTask,
                                                 {{"num_tokens", tensors.at("key").shape[0]},
                                                  {"num_kv_heads", cache[2]},
                                                  {"head_size", cache[3]},
                                                  {"num_blocks", cache[0]},
                                                  {"block_size", cache[1]}},
                                                 tensors);
  REQUIRE_MESSAGE(status.ok(), status.error().message);
}

// Two tokens of one head of 2 into 3 blocks of 4 slots; cache element i starts as 100 + i
// (key) and 200 + i (value).
Tensors two_tokens(double slot0, double slot1) {
  std::vector<double> key_cache(24), value_cache(24);
  for (std::size_t i = 0; i < 24; ++i) {
    key_cache[i] = 100.0 + static_cast<double>(i);
    value_cache[i] = 200.0 + static_cast<double>(i);
  }
  return Tensors{
      {"key", {core::DType::kBF16, {2, 1, 2}, {1.0, 2.0, 3.0, 4.0}}},
      {"value", {core::DType::kBF16, {2, 1, 2}, {5.0, 6.0, 7.0, 8.0}}},
      {"key_cache", {core::DType::kBF16, {3, 4, 1, 2}, key_cache}},
      {"value_cache", {core::DType::kBF16, {3, 4, 1, 2}, value_cache}},
      {"slot_mapping", {core::DType::kI64, {2}, {slot0, slot1}}},
  };
}

}  // namespace

TEST_CASE(
    "reshape_and_cache_flash oracle: a slot lands at [slot / block_size, slot % block_size]") {
  // Slot 9 = block 2, offset 1: elements (2 * 4 + 1) * 2 = 18, 19. Slot 2 = block 0, offset 2:
  // elements 4, 5. Every other element keeps its value.
  Tensors t = two_tokens(9.0, 2.0);
  run(t);
  for (std::size_t i = 0; i < 24; ++i) {
    CAPTURE(i);
    double key = 100.0 + static_cast<double>(i);
    double value = 200.0 + static_cast<double>(i);
    if (i == 18 || i == 19) {
      key = i == 18 ? 1.0 : 2.0;
      value = i == 18 ? 5.0 : 6.0;
    }
    if (i == 4 || i == 5) {
      key = i == 4 ? 3.0 : 4.0;
      value = i == 4 ? 7.0 : 8.0;
    }
    CHECK(t["key_cache"].values[i] == key);
    CHECK(t["value_cache"].values[i] == value);
  }
}

TEST_CASE("reshape_and_cache_flash oracle: padding tokens (slot < 0) write nothing") {
  Tensors t = two_tokens(-1.0, 11.0);
  run(t);
  for (std::size_t i = 0; i < 24; ++i) {
    CAPTURE(i);
    const bool written = i == 22 || i == 23;  // slot 11 = block 2, offset 3
    CHECK(t["key_cache"].values[i] == (written ? (i == 22 ? 3.0 : 4.0) : 100.0 + double(i)));
    CHECK(t["value_cache"].values[i] == (written ? (i == 22 ? 7.0 : 8.0) : 200.0 + double(i)));
  }
  // A batch of padding only leaves both caches as they were.
  Tensors all_padding = two_tokens(-1.0, -1.0);
  const auto key_before = all_padding["key_cache"].values;
  const auto value_before = all_padding["value_cache"].values;
  run(all_padding);
  CHECK(all_padding["key_cache"].values == key_before);
  CHECK(all_padding["value_cache"].values == value_before);
}

TEST_CASE("reshape_and_cache_flash oracle: a slot past the cache is refused, not written") {
  Tensors t = two_tokens(12.0, 0.0);  // 3 blocks of 4: slots 0..11
  CHECK_FALSE(oracle_test::oracle_status(kTask,
                                         {{"num_tokens", 2},
                                          {"num_kv_heads", 1},
                                          {"head_size", 2},
                                          {"num_blocks", 3},
                                          {"block_size", 4}},
                                         t)
                  .ok());
}

TEST_CASE(
    "reshape_and_cache_flash oracle: on generated cases, named slots hold their token's rows "
    "and every other slot its starting value") {
  const tasks::Task& task = cache_task();
  for (const char* name : {"h_tokens_7", "h_row_30", "h_mostly_padding", "h_full_cache"}) {
    CAPTURE(name);
    const tasks::Case& c = case_named(task, name);
    const std::uint64_t seed = tasks::case_seed(c, 1);
    const Tensors tensors = oracle_test::run_case(task, c);
    const std::int64_t row = c.symbols.at("num_kv_heads") * c.symbols.at("head_size");
    const std::int64_t slots = c.symbols.at("num_blocks") * c.symbols.at("block_size");
    const auto& slot_mapping = tensors.at("slot_mapping").values;
    std::map<std::int64_t, std::int64_t> token_of_slot;
    std::size_t padding = 0;
    for (std::size_t t = 0; t < slot_mapping.size(); ++t) {
      if (slot_mapping[t] < 0) {
        CHECK(slot_mapping[t] == -1.0);
        ++padding;
        continue;
      }
      CHECK(token_of_slot.emplace(static_cast<std::int64_t>(slot_mapping[t]), t).second);
    }
    if (std::string(name) == "h_full_cache") {
      CHECK(padding == 0);
      CHECK(static_cast<std::int64_t>(token_of_slot.size()) == slots);
    } else {
      CHECK(padding > 0);
    }
    for (const char* pair : {"key", "value"}) {
      const std::string cache_name = std::string(pair) + "_cache";
      const tasks::TensorSpec* cache_spec = task.find_tensor(cache_name);
      REQUIRE(cache_spec != nullptr);
      auto start_bytes = tasks::generate_tensor(c, *cache_spec, seed, 0);
      REQUIRE(start_bytes.ok());
      const auto start = tasks::decode_values(cache_spec->dtype, start_bytes->data(),
                                              static_cast<std::size_t>(slots * row));
      const auto& source = tensors.at(pair).values;
      const auto& cache = tensors.at(cache_name).values;
      std::size_t wrong = 0;
      for (std::int64_t s = 0; s < slots; ++s) {
        const auto it = token_of_slot.find(s);
        for (std::int64_t i = 0; i < row; ++i) {
          const double want =
              it == token_of_slot.end() ? start[s * row + i] : source[it->second * row + i];
          wrong += cache[s * row + i] == want ? 0 : 1;
        }
      }
      CAPTURE(pair);
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("reshape_and_cache_flash oracle: reproduces every recorded stories260K write exactly") {
  std::size_t compared = 0;
  std::size_t padded_calls = 0;
  oracle_test::for_each_recorded_call(
      "reshape_and_cache_flash", [&](const oracle_test::RecordedCall& call) {
        Tensors t;
        for (const char* arg : {"key", "value", "key_cache", "value_cache", "slot_mapping"}) {
          const tasks::CapturedTensor* recorded = call.group.tensor(call.name, arg);
          REQUIRE(recorded != nullptr);
          t[arg] = oracle_test::decoded(*recorded);
        }
        for (const double slot : t["slot_mapping"].values) {
          if (slot < 0) {
            ++padded_calls;
            break;
          }
        }
        run(t);
        for (const char* arg : {"key_cache", "value_cache"}) {
          const tasks::CapturedTensor* after = call.group.tensor(call.name, arg, true);
          REQUIRE(after != nullptr);
          CHECK(t[arg].values == oracle_test::decoded(*after).values);
          compared += t[arg].values.size();
        }
      });
  CHECK(compared > 10000);
  CHECK(padded_calls > 0);  // the decode recordings hold padding rows (slot -1)
}

TEST_CASE(
    "reshape_and_cache_flash oracle: the task's captured cases are the recordings, shapes "
    "included") {
  // The hidden captured cases read the recorded inputs through the manifest (generator
  // "captured"); their symbols must give exactly the recorded sizes, and the oracle's caches
  // must be the recorded ones, bit for bit.
  const tasks::Task& task = cache_task();
  oracle_test::check_captured_cases(task, "reshape_and_cache_flash", {}, false);
  oracle_test::compare_captured_cases(task, {"key_cache", "value_cache"});
}

TEST_CASE("reshape_and_cache_flash: every generated slot mapping spans exactly its cache") {
  // A generator cannot see the symbols: each case's permutation max must be its
  // num_blocks * block_size, or slots miss part of the cache or fall outside it.
  for (const auto& c : cache_task().cases) {
    CAPTURE(c.name);
    const auto& slots = c.values.at("slot_mapping");
    if (slots.kind != tasks::GeneratorKind::kPermutation) continue;
    CHECK(slots.max == c.symbols.at("num_blocks") * c.symbols.at("block_size"));
    CHECK(slots.max >= c.symbols.at("num_tokens"));
  }
}
