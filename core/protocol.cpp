// Request validation and reply skeletons for protocol v1.
#include "core/protocol.hpp"

#include <array>
#include <limits>

#include "core/text.hpp"

namespace crucible::core {
namespace {

constexpr std::array<std::string_view, 8> kOpNames{"hello", "tasks", "task",  "reset",
                                                   "step",  "score", "close", "stats"};

Error bad(std::string message) { return Error{ErrorCode::kBadRequest, std::move(message)}; }

Error wrong_type(std::string_view field, std::string_view want, const Value& got) {
  return bad("field '" + std::string(field) + "' must be " + std::string(want) + ", got " +
             std::string(value_type_name(got)));
}

const Value* find(const Value& frame, std::string_view key) {
  const auto it = frame.find(key);
  return it == frame.end() ? nullptr : &*it;
}

Result<std::string> required_string(const Value& frame, std::string_view key,
                                    std::size_t max_bytes) {
  const Value* field = find(frame, key);
  if (field == nullptr) return bad("missing field '" + std::string(key) + "'");
  if (!field->is_string()) return wrong_type(key, "a string", *field);
  const auto& text = field->get_ref<const std::string&>();
  if (text.size() > max_bytes) {
    return Error{ErrorCode::kTooLarge, "field '" + std::string(key) + "' is " +
                                           std::to_string(text.size()) + " bytes; the limit is " +
                                           std::to_string(max_bytes)};
  }
  if (text.empty()) return bad("field '" + std::string(key) + "' must not be empty");
  return text;
}

Result<std::optional<std::string>> optional_string(const Value& frame, std::string_view key,
                                                   std::size_t max_bytes) {
  const Value* field = find(frame, key);
  if (field == nullptr || field->is_null()) return std::optional<std::string>{};
  auto text = required_string(frame, key, max_bytes);
  if (!text) return text.error();
  return std::optional<std::string>(std::move(text).value());
}

Result<std::optional<std::uint64_t>> optional_uint(const Value& frame, std::string_view key,
                                                   std::uint64_t max_value) {
  const Value* field = find(frame, key);
  if (field == nullptr || field->is_null()) return std::optional<std::uint64_t>{};
  if (field->is_number_unsigned()) {
    const auto value = field->get<std::uint64_t>();
    if (value > max_value) {
      return Error{ErrorCode::kInvalidArgument, "field '" + std::string(key) + "' is " +
                                                    std::to_string(value) + "; at most " +
                                                    std::to_string(max_value) + " is allowed"};
    }
    return std::optional<std::uint64_t>(value);
  }
  if (field->is_number_integer()) {
    const auto value = field->get<std::int64_t>();
    if (value < 0) {
      return Error{ErrorCode::kInvalidArgument,
                   "field '" + std::string(key) + "' must not be negative"};
    }
    if (static_cast<std::uint64_t>(value) > max_value) {
      return Error{ErrorCode::kInvalidArgument, "field '" + std::string(key) + "' is " +
                                                    std::to_string(value) + "; at most " +
                                                    std::to_string(max_value) + " is allowed"};
    }
    return std::optional<std::uint64_t>(static_cast<std::uint64_t>(value));
  }
  return wrong_type(key, "a non-negative integer", *field);
}

Result<Value> optional_map(const Value& frame, std::string_view key) {
  const Value* field = find(frame, key);
  if (field == nullptr || field->is_null()) return Value(nullptr);
  if (!field->is_object()) return wrong_type(key, "a map", *field);
  return *field;
}

// `tag`: null, or a map as kMaxTagKeys and the rest describe; a wrong type is kBadRequest, a
// limit kInvalidArgument, each naming the key.
Result<Value> optional_tag(const Value& frame) {
  const Value* field = find(frame, "tag");
  if (field == nullptr || field->is_null()) return Value(nullptr);
  if (!field->is_object())
    return wrong_type("tag", "a map of strings to strings or integers", *field);
  const auto limit = [](const std::string& why) { return Error{ErrorCode::kInvalidArgument, why}; };
  if (field->size() > kMaxTagKeys) {
    return limit("field 'tag' has " + std::to_string(field->size()) + " keys; at most " +
                 std::to_string(kMaxTagKeys) + " are allowed");
  }
  for (const auto& [key, value] : field->items()) {
    if (key.empty()) return limit("field 'tag' has an empty key");
    if (key.size() > kMaxTagKeyBytes) {
      return limit("tag key '" + excerpt(key, 40) + "' is over " + std::to_string(kMaxTagKeyBytes) +
                   " bytes");
    }
    if (value.is_string()) {
      if (value.get_ref<const std::string&>().size() > kMaxTagValueBytes) {
        return limit("tag value of '" + key + "' is over " + std::to_string(kMaxTagValueBytes) +
                     " bytes");
      }
    } else if (!value.is_number_integer()) {
      return wrong_type("tag." + key, "a string or an integer", value);
    }
  }
  return *field;
}

// `model`: null, a model name or a map (the server resolves it against its models).
Result<Value> optional_model(const Value& frame) {
  const Value* field = find(frame, "model");
  if (field == nullptr || field->is_null()) return Value(nullptr);
  if (!field->is_string() && !field->is_object()) {
    return wrong_type("model", "a model name or a map {name, variables...}", *field);
  }
  return *field;
}

Result<Value> optional_plan(const Value& frame) {
  const Value* field = find(frame, "plan");
  if (field == nullptr || field->is_null()) return Value(nullptr);
  if (!field->is_array() && !field->is_object()) {
    return wrong_type("plan", "an array of launches or a map", *field);
  }
  return *field;
}

}  // namespace

std::string_view op_name(Op op) { return kOpNames.at(static_cast<std::size_t>(op)); }

std::optional<Op> op_from_name(std::string_view name) {
  for (std::size_t i = 0; i < kOpNames.size(); ++i) {
    if (kOpNames[i] == name) return static_cast<Op>(i);
  }
  return std::nullopt;
}

DecodeLimits ProtocolLimits::decode_limits() const {
  DecodeLimits out;
  out.max_bytes = max_frame_bytes;
  out.max_depth = max_depth;
  out.max_array_items = max_array_items;
  out.max_map_entries = max_map_entries;
  out.max_str_bytes = static_cast<std::uint32_t>(max_frame_bytes);
  out.max_bin_bytes = static_cast<std::uint32_t>(max_frame_bytes);
  return out;
}

std::string_view value_type_name(const Value& value) {
  switch (value.type()) {
    case Value::value_t::null:
      return "nil";
    case Value::value_t::boolean:
      return "boolean";
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned:
      return "integer";
    case Value::value_t::number_float:
      return "float";
    case Value::value_t::string:
      return "string";
    case Value::value_t::binary:
      return "binary";
    case Value::value_t::array:
      return "array";
    case Value::value_t::object:
      return "map";
    case Value::value_t::discarded:
      return "discarded";
  }
  return "unknown";
}

Value recover_id(const Value& frame, const ProtocolLimits& limits) {
  if (!frame.is_object()) return nullptr;
  const Value* id = find(frame, "id");
  if (id == nullptr) return nullptr;
  if (id->is_number_integer()) return *id;
  if (id->is_string() && id->get_ref<const std::string&>().size() <= limits.max_id_bytes) {
    return *id;
  }
  return nullptr;
}

Result<Envelope> parse_envelope(const Value& frame, const ProtocolLimits& limits) {
  if (!frame.is_object()) {
    return bad("a request must be a msgpack map, got " + std::string(value_type_name(frame)));
  }
  const Value* id = find(frame, "id");
  if (id == nullptr) return bad("missing field 'id'");
  if (!id->is_number_integer() && !id->is_string()) {
    return wrong_type("id", "an integer or a string", *id);
  }
  if (id->is_string() && id->get_ref<const std::string&>().size() > limits.max_id_bytes) {
    return Error{ErrorCode::kTooLarge,
                 "field 'id' is longer than " + std::to_string(limits.max_id_bytes) + " bytes"};
  }
  const Value* version = find(frame, "v");
  if (version == nullptr) return bad("missing field 'v' (protocol version)");
  if (!version->is_number_integer()) return wrong_type("v", "an integer", *version);
  // Compared as sent: an unsigned 2^64-1 must not pass for -1 in the check or the message.
  const bool supported =
      version->is_number_unsigned()
          ? version->get<std::uint64_t>() == static_cast<std::uint64_t>(kProtocolVersion)
          : version->get<std::int64_t>() == kProtocolVersion;
  if (!supported) {
    return Error{ErrorCode::kUnsupportedVersion,
                 "protocol version " + version->dump() +
                     " is not supported; this server speaks version " +
                     std::to_string(kProtocolVersion)};
  }
  const Value* op = find(frame, "op");
  if (op == nullptr) return bad("missing field 'op'");
  if (!op->is_string()) return wrong_type("op", "a string", *op);
  const auto parsed = op_from_name(op->get_ref<const std::string&>());
  if (!parsed) {
    std::string known;
    for (const auto name : kOpNames) known.append(known.empty() ? "" : ", ").append(name);
    const auto& text = op->get_ref<const std::string&>();
    return Error{ErrorCode::kUnknownOp,
                 "unknown op '" + excerpt(text, 64) + "'; known ops: " + known};
  }
  return Envelope{*id, *parsed};
}

Result<HelloRequest> parse_hello(const Value& frame, const ProtocolLimits& limits) {
  auto client = optional_string(frame, "client", limits.max_id_bytes);
  if (!client) return client.error();
  return HelloRequest{std::move(client).value()};
}

Result<TasksRequest> parse_tasks(const Value& frame, const ProtocolLimits& limits) {
  auto category = optional_string(frame, "category", limits.max_id_bytes);
  if (!category) return category.error();
  return TasksRequest{std::move(category).value()};
}

Result<TaskRequest> parse_task(const Value& frame, const ProtocolLimits& limits) {
  auto task = required_string(frame, "task", limits.max_id_bytes);
  if (!task) return task.error();
  return TaskRequest{std::move(task).value()};
}

Result<ResetRequest> parse_reset(const Value& frame, const ProtocolLimits& limits) {
  ResetRequest out;
  auto task = required_string(frame, "task", limits.max_id_bytes);
  if (!task) return task.error();
  out.task = std::move(task).value();
  auto seed = optional_uint(frame, "seed", std::numeric_limits<std::uint64_t>::max());
  if (!seed) return seed.error();
  out.seed = *seed;
  auto max_steps = optional_uint(frame, "max_steps", limits.max_steps_cap);
  if (!max_steps) return max_steps.error();
  if (*max_steps) {
    if (**max_steps == 0) {
      return Error{ErrorCode::kInvalidArgument, "field 'max_steps' must be at least 1"};
    }
    out.max_steps = static_cast<std::uint32_t>(**max_steps);
  }
  auto reward = optional_map(frame, "reward");
  if (!reward) return reward.error();
  out.reward = std::move(reward).value();
  auto options = optional_map(frame, "options");
  if (!options) return options.error();
  out.options = std::move(options).value();
  auto tag = optional_tag(frame);
  if (!tag) return tag.error();
  out.tag = std::move(tag).value();
  auto model = optional_model(frame);
  if (!model) return model.error();
  out.model = std::move(model).value();
  return out;
}

Result<StepRequest> parse_step(const Value& frame, const ProtocolLimits& limits) {
  StepRequest out;
  auto episode = required_string(frame, "episode", limits.max_id_bytes);
  if (!episode) return episode.error();
  out.episode = std::move(episode).value();
  auto source = required_string(frame, "source", limits.max_source_bytes);
  if (!source) return source.error();
  out.source = std::move(source).value();
  auto plan = optional_plan(frame);
  if (!plan) return plan.error();
  out.plan = std::move(plan).value();
  auto tag = optional_tag(frame);
  if (!tag) return tag.error();
  out.tag = std::move(tag).value();
  return out;
}

Result<ScoreRequest> parse_score(const Value& frame, const ProtocolLimits& limits) {
  ScoreRequest out;
  auto task = required_string(frame, "task", limits.max_id_bytes);
  if (!task) return task.error();
  out.task = std::move(task).value();
  auto source = required_string(frame, "source", limits.max_source_bytes);
  if (!source) return source.error();
  out.source = std::move(source).value();
  auto plan = optional_plan(frame);
  if (!plan) return plan.error();
  out.plan = std::move(plan).value();
  auto seed = optional_uint(frame, "seed", std::numeric_limits<std::uint64_t>::max());
  if (!seed) return seed.error();
  out.seed = *seed;
  auto reward = optional_map(frame, "reward");
  if (!reward) return reward.error();
  out.reward = std::move(reward).value();
  auto tag = optional_tag(frame);
  if (!tag) return tag.error();
  out.tag = std::move(tag).value();
  auto model = optional_model(frame);
  if (!model) return model.error();
  out.model = std::move(model).value();
  return out;
}

Result<CloseRequest> parse_close(const Value& frame, const ProtocolLimits& limits) {
  auto episode = required_string(frame, "episode", limits.max_id_bytes);
  if (!episode) return episode.error();
  return CloseRequest{std::move(episode).value()};
}

Value ok_reply(const Value& id) { return Value{{"v", kProtocolVersion}, {"id", id}, {"ok", true}}; }

Value error_reply(const Value& id, ErrorCode code, std::string_view message) {
  return Value{{"v", kProtocolVersion},
               {"id", id},
               {"ok", false},
               {"error", Value{{"code", error_code_name(code)},
                               {"message", one_line(message, kMaxMessageBytes)}}}};
}

std::string encode_reply(Value reply) {
  repair_utf8(reply);
  return encode_msgpack(reply);
}

Value make_request(const Value& id, Op op) {
  return Value{{"v", kProtocolVersion}, {"id", id}, {"op", op_name(op)}};
}

}  // namespace crucible::core
