// Fuzz target: one request frame through the server's decoding, validation and reply encoding.
// Input: the bytes of one ZeroMQ request frame. Findings: any crash, leak or UB, and a reply
// whose msgpack does not decode, holds a string that is not valid UTF-8, or carries an error
// message that is not one line of at most kMaxMessageBytes (+ "...").
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "core/msgpack_codec.hpp"
#include "core/protocol.hpp"
#include "core/result.hpp"
#include "core/text.hpp"
#include "fuzz/fuzz_checks.hpp"

namespace {

using crucible::core::ErrorCode;
using crucible::core::Value;
namespace core = crucible::core;
namespace fuzz = crucible::fuzz;

// What the client sees: the reply encoded as the server sends it, decoded again.
void check_reply(const Value& reply) {
  const std::string wire = core::encode_reply(reply);
  auto decoded = core::decode_msgpack(wire, core::trusted_decode_limits(wire.size()));
  if (!decoded) {
    fuzz::fail("an encoded reply does not decode: " + decoded.error().message);
  }
  fuzz::require_utf8_everywhere(*decoded, "reply");
  if (!decoded->is_object() || !decoded->contains("ok") || !(*decoded)["ok"].is_boolean()) {
    fuzz::fail("a reply without a boolean 'ok'", decoded->dump());
  }
  if ((*decoded)["ok"].get<bool>()) return;
  const Value& error = (*decoded)["error"];
  if (!error.is_object() || !error.contains("code") || !error.contains("message") ||
      !error["code"].is_string() || !error["message"].is_string()) {
    fuzz::fail("an error reply without {code, message} strings", decoded->dump());
  }
  if (!core::error_code_from_name(error["code"].get_ref<const std::string&>())) {
    fuzz::fail("an error reply with an unknown code", error["code"].get_ref<const std::string&>());
  }
  const auto& message = error["message"].get_ref<const std::string&>();
  if (message.size() > core::kMaxMessageBytes + 3) {
    fuzz::fail("an error message over kMaxMessageBytes", message);
  }
  for (std::size_t i = 0; i < message.size(); ++i) {
    const auto byte = static_cast<unsigned char>(message[i]);
    const bool c1 = byte == 0xC2 && i + 1 < message.size() &&
                    static_cast<unsigned char>(message[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(message[i + 1]) <= 0x9F;
    if (byte < 0x20 || byte == 0x7F || c1) fuzz::fail("an error message with a control", message);
  }
}

void check_error(const Value& id, const core::Error& error) {
  check_reply(core::error_reply(id, error.code, error.message));
}

// The op's own parser; an accepted request is answered with what it asked for echoed back (as
// replies echo task ids, episode ids and options), and `source` also as the message of an error
// reply (as a compile log quotes it).
template <class Request, class Fields>
void answer(const Value& frame, const Value& id, core::Result<Request> request, Fields fields) {
  if (!request) return check_error(id, request.error());
  Value reply = core::ok_reply(id);
  fields(*request, reply);
  reply["request"] = frame;
  check_reply(reply);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const core::ProtocolLimits limits;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto frame = core::decode_msgpack(bytes, limits.decode_limits());
  if (!frame) {
    check_error(nullptr, frame.error());
    return 0;
  }
  fuzz::compare_utf8_verdicts(*frame);
  const Value recovered = core::recover_id(*frame, limits);
  auto envelope = core::parse_envelope(*frame, limits);
  if (!envelope) {
    check_error(recovered, envelope.error());
    return 0;
  }
  if (recovered != envelope->id) fuzz::fail("recover_id differs from the envelope's id");
  const Value& id = envelope->id;
  switch (envelope->op) {
    case core::Op::kHello:
      answer(*frame, id, core::parse_hello(*frame, limits), [](const auto& r, Value& reply) {
        if (r.client) reply["client"] = *r.client;
      });
      break;
    case core::Op::kTasks:
      answer(*frame, id, core::parse_tasks(*frame, limits), [](const auto& r, Value& reply) {
        if (r.category) reply["category"] = *r.category;
      });
      break;
    case core::Op::kTask:
      answer(*frame, id, core::parse_task(*frame, limits),
             [](const auto& r, Value& reply) { reply["task"] = r.task; });
      break;
    case core::Op::kReset:
      answer(*frame, id, core::parse_reset(*frame, limits), [](const auto& r, Value& reply) {
        reply["task"] = r.task;
        if (r.seed) reply["seed"] = *r.seed;
        if (r.max_steps) reply["max_steps"] = *r.max_steps;
        reply["reward"] = r.reward;
        reply["options"] = r.options;
      });
      break;
    case core::Op::kStep: {
      auto step = core::parse_step(*frame, limits);
      if (step) check_error(id, core::Error{ErrorCode::kInvalidArgument, step->source});
      answer(*frame, id, std::move(step), [](const auto& r, Value& reply) {
        reply["episode"] = r.episode;
        reply["plan"] = r.plan;
      });
      break;
    }
    case core::Op::kScore: {
      auto score = core::parse_score(*frame, limits);
      if (score) check_error(id, core::Error{ErrorCode::kInvalidArgument, score->source});
      answer(*frame, id, std::move(score), [](const auto& r, Value& reply) {
        reply["task"] = r.task;
        reply["plan"] = r.plan;
        if (r.seed) reply["seed"] = *r.seed;
        reply["reward"] = r.reward;
      });
      break;
    }
    case core::Op::kClose:
      answer(*frame, id, core::parse_close(*frame, limits),
             [](const auto& r, Value& reply) { reply["episode"] = r.episode; });
      break;
    case core::Op::kStats: {
      Value reply = core::ok_reply(id);
      reply["request"] = *frame;
      check_reply(reply);
      break;
    }
  }
  return 0;
}
