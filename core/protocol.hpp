// The wire protocol: every op, request and reply shape, limits, and their validation.
// docs/protocol.md is the prose version of this file; keep the two in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/msgpack_codec.hpp"
#include "core/result.hpp"
#include "core/value.hpp"

namespace crucible::core {

// Version 1. A request whose `v` differs gets `unsupported_version`; replies always carry the
// server's version.
inline constexpr std::int64_t kProtocolVersion = 1;

enum class Op : std::uint8_t { kHello, kTasks, kTask, kReset, kStep, kScore, kClose, kStats };
std::string_view op_name(Op op);
std::optional<Op> op_from_name(std::string_view name);

// Limits a server enforces on every request. Defaults are the documented ones.
struct ProtocolLimits {
  std::size_t max_frame_bytes = 1u << 20;     // one request frame
  std::size_t max_source_bytes = 256u << 10;  // `source` of step/score
  std::size_t max_id_bytes = 128;             // string request ids and episode ids
  std::uint32_t max_depth = 16;               // msgpack nesting
  std::uint32_t max_array_items = 4096;
  std::uint32_t max_map_entries = 256;
  std::uint32_t max_steps_cap = 10000;  // largest max_steps a reset may ask for

  DecodeLimits decode_limits() const;
};

// The envelope every request carries. `id` is echoed verbatim in the reply: an unsigned or
// signed integer or a string of at most max_id_bytes.
struct Envelope {
  Value id;
  Op op;
};

// Parses {v, id, op}. Errors: kBadRequest (not a map, missing/mistyped field), kUnknownOp,
// kUnsupportedVersion, kTooLarge (id too long).
Result<Envelope> parse_envelope(const Value& frame, const ProtocolLimits& limits);
// Best effort: the frame's id if it is a valid id, else null. Used to address error replies
// to requests whose envelope failed to parse.
Value recover_id(const Value& frame, const ProtocolLimits& limits);

struct HelloRequest {
  std::optional<std::string> client;  // free-form client name, for logs
};
struct TasksRequest {
  std::optional<std::string> category;  // filter
};
struct TaskRequest {
  std::string task;
};
struct ResetRequest {
  std::string task;
  std::optional<std::uint64_t> seed;       // value seed for generated cases; server picks if absent
  std::optional<std::uint32_t> max_steps;  // episode length; server default if absent
  Value reward;                            // reward spec map, or null for the default
  Value options;                           // free-form map kept with the episode, or null
  Value tag;                               // request tag (check_tag), or null
  Value model;  // model check: a model name or a map {name, variables...}, or null
};
struct StepRequest {
  std::string episode;
  std::string source;
  Value plan;  // structured launch plan (array of launch maps), or null: use directives
  Value tag;   // request tag, or null: the episode's
};
struct ScoreRequest {
  std::string task;
  std::string source;
  Value plan;
  std::optional<std::uint64_t> seed;
  Value reward;
  Value tag;    // request tag, or null
  Value model;  // model check, as on reset, or null
};
struct CloseRequest {
  std::string episode;
};

// A request tag (`tag` on reset, step and score) labels a request for the logs: a map of at
// most kMaxTagKeys non-empty string keys of at most kMaxTagKeyBytes bytes, each mapped to a
// string of at most kMaxTagValueBytes bytes or a 64-bit integer. The reply echoes it and the
// trajectory record keeps it; a step without one carries its episode's.
inline constexpr std::size_t kMaxTagKeys = 8;
inline constexpr std::size_t kMaxTagKeyBytes = 32;
inline constexpr std::size_t kMaxTagValueBytes = 256;

// Each parser reads the op's fields from the full request map and reports the first problem
// as kBadRequest ("field 'source' must be a string, got integer") or kTooLarge.
Result<HelloRequest> parse_hello(const Value& frame, const ProtocolLimits& limits);
Result<TasksRequest> parse_tasks(const Value& frame, const ProtocolLimits& limits);
Result<TaskRequest> parse_task(const Value& frame, const ProtocolLimits& limits);
Result<ResetRequest> parse_reset(const Value& frame, const ProtocolLimits& limits);
Result<StepRequest> parse_step(const Value& frame, const ProtocolLimits& limits);
Result<ScoreRequest> parse_score(const Value& frame, const ProtocolLimits& limits);
Result<CloseRequest> parse_close(const Value& frame, const ProtocolLimits& limits);

// Longest `message` a reply carries, in bytes; longer ones are cut on a character boundary.
inline constexpr std::size_t kMaxMessageBytes = 2048;

// Reply skeletons: {v, id, ok: true} to be filled by the op, and
// {v, id, ok: false, error: {code, message}}. The message is made one line of valid UTF-8
// (controls become spaces) of at most kMaxMessageBytes.
Value ok_reply(const Value& id);
Value error_reply(const Value& id, ErrorCode code, std::string_view message);

// The msgpack bytes of a reply, with every string in it made valid UTF-8 first: whatever a
// request or an agent's source held, a client decoding str as UTF-8 can read every reply.
std::string encode_reply(Value reply);

// Builders for requests (used by the C++ client and tests): {v, id, op} plus nothing else.
Value make_request(const Value& id, Op op);

// Name of a Value's type as shown in error messages: "string", "integer", "map", ...
std::string_view value_type_name(const Value& value);

}  // namespace crucible::core
