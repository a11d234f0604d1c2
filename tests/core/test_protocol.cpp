// Envelope and per-op request validation, with the exact error messages agents see.
#include <doctest/doctest.h>

#include "core/protocol.hpp"

using namespace crucible::core;

namespace {
Value request(std::string_view op) { return Value{{"v", 1}, {"id", 42}, {"op", op}}; }
}  // namespace

TEST_CASE("protocol: envelope errors name the problem") {
  const ProtocolLimits limits;
  struct Case {
    const char* name;
    Value frame;
    ErrorCode code;
    const char* message;
  };
  const Case cases[] = {
      {"not a map", Value::array({1, 2}), ErrorCode::kBadRequest,
       "a request must be a msgpack map, got array"},
      {"no id", Value{{"v", 1}, {"op", "hello"}}, ErrorCode::kBadRequest, "missing field 'id'"},
      {"float id", Value{{"v", 1}, {"id", 1.5}, {"op", "hello"}}, ErrorCode::kBadRequest,
       "field 'id' must be an integer or a string, got float"},
      {"no version", Value{{"id", 1}, {"op", "hello"}}, ErrorCode::kBadRequest,
       "missing field 'v' (protocol version)"},
      {"version 2", Value{{"v", 2}, {"id", 1}, {"op", "hello"}}, ErrorCode::kUnsupportedVersion,
       "protocol version 2 is not supported; this server speaks version 1"},
      {"unknown op", Value{{"v", 1}, {"id", 1}, {"op", "fly"}}, ErrorCode::kUnknownOp,
       "unknown op 'fly'; known ops: hello, tasks, task, reset, step, score, close, stats"},
      {"op not a string", Value{{"v", 1}, {"id", 1}, {"op", 3}}, ErrorCode::kBadRequest,
       "field 'op' must be a string, got integer"},
      {"long id", Value{{"v", 1}, {"id", std::string(200, 'x')}, {"op", "hello"}},
       ErrorCode::kTooLarge, "field 'id' is longer than 128 bytes"},
  };
  for (const auto& c : cases) {
    const std::string name = c.name;
    CAPTURE(name);
    const auto result = parse_envelope(c.frame, limits);
    REQUIRE_FALSE(result.ok());
    CHECK(result.error().code == c.code);
    CHECK(result.error().message == c.message);
  }
}

TEST_CASE("protocol: a valid envelope keeps the id verbatim") {
  const auto by_int = parse_envelope(request("step"), ProtocolLimits{});
  REQUIRE(by_int.ok());
  CHECK(by_int->op == Op::kStep);
  CHECK(by_int->id == 42);
  Value frame = request("hello");
  frame["id"] = "req-7";
  const auto by_string = parse_envelope(frame, ProtocolLimits{});
  REQUIRE(by_string.ok());
  CHECK(by_string->id == "req-7");
}

TEST_CASE("protocol: recover_id addresses error replies when it can") {
  const ProtocolLimits limits;
  CHECK(recover_id(Value{{"id", 5}, {"op", 3}}, limits) == 5);
  CHECK(recover_id(Value{{"id", 1.5}}, limits).is_null());
  CHECK(recover_id(Value::array(), limits).is_null());
}

TEST_CASE("protocol: step requires an episode and a source within the size limit") {
  ProtocolLimits limits;
  limits.max_source_bytes = 10;
  Value frame = request("step");
  CHECK(parse_step(frame, limits).error().message == "missing field 'episode'");
  frame["episode"] = "e1";
  CHECK(parse_step(frame, limits).error().message == "missing field 'source'");
  frame["source"] = 7;
  CHECK(parse_step(frame, limits).error().message ==
        "field 'source' must be a string, got integer");
  frame["source"] = std::string(11, 'x');
  const auto too_long = parse_step(frame, limits);
  CHECK(too_long.error().code == ErrorCode::kTooLarge);
  CHECK(too_long.error().message == "field 'source' is 11 bytes; the limit is 10");
  frame["source"] = "__global__";
  frame["plan"] = "oops";
  CHECK(parse_step(frame, limits).error().message ==
        "field 'plan' must be an array of launches or a map, got string");
  frame.erase("plan");
  const auto ok = parse_step(frame, limits);
  REQUIRE(ok.ok());
  CHECK(ok->source == "__global__");
  CHECK(ok->plan.is_null());
}

TEST_CASE("protocol: reset validates seed, max_steps and reward spec") {
  const ProtocolLimits limits;
  Value frame = request("reset");
  frame["task"] = "llm/rms_norm";
  frame["seed"] = -1;
  CHECK(parse_reset(frame, limits).error().code == ErrorCode::kInvalidArgument);
  frame["seed"] = 18446744073709551615ull;
  frame["max_steps"] = 0;
  CHECK(parse_reset(frame, limits).error().message == "field 'max_steps' must be at least 1");
  frame["max_steps"] = 1000000;
  CHECK(parse_reset(frame, limits).error().message ==
        "field 'max_steps' is 1000000; at most 10000 is allowed");
  frame["max_steps"] = 8;
  frame["reward"] = "default";
  CHECK(parse_reset(frame, limits).error().message == "field 'reward' must be a map, got string");
  frame["reward"] = Value{{"preset", "default"}};
  const auto ok = parse_reset(frame, limits);
  REQUIRE(ok.ok());
  CHECK(ok->seed == 18446744073709551615ull);
  CHECK(ok->max_steps == 8u);
  CHECK(ok->reward["preset"] == "default");
  CHECK(ok->model.is_null());
}

TEST_CASE("protocol: the model field of reset and score is a name or a map") {
  const ProtocolLimits limits;
  Value frame = request("score");
  frame["task"] = "llm/silu_and_mul";
  frame["source"] = "__global__ void k() {}";
  frame["model"] = 3;
  CHECK(parse_score(frame, limits).error().message ==
        "field 'model' must be a model name or a map {name, variables...}, got integer");
  frame["model"] = "llama3_8b";
  CHECK(parse_score(frame, limits)->model == "llama3_8b");
  frame["model"] = Value{{"name", "llama3_8b"}, {"num_seqs", 8}};
  CHECK(parse_score(frame, limits)->model["num_seqs"] == 8);
  Value reset = request("reset");
  reset["task"] = "llm/silu_and_mul";
  reset["model"] = Value::array();
  CHECK(parse_reset(reset, limits).error().code == ErrorCode::kBadRequest);
  reset["model"] = "stories260K";
  CHECK(parse_reset(reset, limits)->model == "stories260K");
}

TEST_CASE("protocol: replies carry version, id and a coded error") {
  const auto reply = error_reply("abc", ErrorCode::kUnknownTask, "no task 'x'");
  CHECK(reply["v"] == 1);
  CHECK(reply["id"] == "abc");
  CHECK(reply["ok"] == false);
  CHECK(reply["error"]["code"] == "unknown_task");
  CHECK(reply["error"]["message"] == "no task 'x'");
  CHECK(ok_reply(3)["ok"] == true);
}
