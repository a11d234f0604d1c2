// The HTTP front: cpp-httplib threads turn HTTP requests into wire frames for the server's ROUTER
// (over inproc DEALER sockets) and wire replies into JSON bodies with HTTP statuses.
#include "env/http_front.hpp"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
#include "core/step_status.hpp"
#include "core/text.hpp"

namespace crucible::env {

using core::ErrorCode;
using core::Value;
using Clock = std::chrono::steady_clock;

int http_status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadRequest:
    case ErrorCode::kUnsupportedVersion:
    case ErrorCode::kUnknownOp:
    case ErrorCode::kInvalidArgument:
      return 400;
    case ErrorCode::kTooLarge:
      return 413;
    case ErrorCode::kUnknownTask:
    case ErrorCode::kUnknownEpisode:
      return 404;
    case ErrorCode::kEpisodeDone:
      return 409;
    case ErrorCode::kBusy:
    case ErrorCode::kShuttingDown:
      return 503;
    case ErrorCode::kTimeout:
      return 504;
    case ErrorCode::kInternal:
    case ErrorCode::kIo:
      return 500;
  }
  return 500;
}

core::Result<HttpAddress> parse_http_address(std::string_view text, bool allow_remote) {
  const auto refuse = [&](const std::string& why) {
    return core::Error{ErrorCode::kInvalidArgument,
                       "'" + core::excerpt(text, 200) + "' is not an HTTP address: " + why +
                           " (examples: 127.0.0.1:8080, localhost:8080, [::1]:8080)"};
  };
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return refuse("it is HOST:PORT");
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoul(std::string(port)) > 65535) {
    return refuse("the port must be 0-65535");
  }
  if (host.starts_with('[') != host.ends_with(']')) return refuse("unbalanced brackets");
  if (host.starts_with('[')) {
    host = host.substr(1, host.size() - 2);
    if (host.empty()) return refuse("the IPv6 address in brackets is empty");
  } else if (host.find(':') != std::string_view::npos) {
    return refuse("an IPv6 address goes in brackets");
  }
  if (host.find_first_of(" /\t\r\n") != std::string_view::npos) {
    return refuse("the host holds a space or a slash");
  }
  // Loopback is decided by the same rule as the ZeroMQ bind, so both refuse alike.
  const std::string as_endpoint =
      "tcp://" + std::string(text.substr(0, colon)) + ":" + std::string(port);
  if (!allow_remote && !is_local_endpoint(as_endpoint)) {
    return core::Error{ErrorCode::kInvalidArgument,
                       "refusing to serve HTTP on " + core::excerpt(text, 200) +
                           ": a non-loopback address needs a bearer token and TLS "
                           "(--http-token-file with --http-cert and --http-key), or --insecure "
                           "(or its older name --allow-remote) on a closed network"};
  }
  HttpAddress address;
  address.host = host == "localhost" ? "127.0.0.1" : std::string(host);
  address.port = static_cast<std::uint16_t>(std::stoul(std::string(port)));
  return address;
}

namespace {

constexpr const char* kJsonType = "application/json";
constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
// Threads of the pool that steps and scores may not take.
constexpr int kReservedThreads = 4;

std::string url_of(const std::string& host, std::uint16_t port, bool tls = false) {
  const bool v6 = host.find(':') != std::string::npos;
  return std::string(tls ? "https://" : "http://") + (v6 ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

// Whether `header` is "Bearer <token>". The comparison takes the same time wherever the first
// difference is, so response times do not spell the token out.
bool bearer_matches(std::string_view header, std::string_view token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() < kScheme.size()) return false;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) !=
        std::tolower(static_cast<unsigned char>(kScheme[i]))) {
      return false;
    }
  }
  const std::string_view given = header.substr(kScheme.size());
  unsigned char difference = given.size() == token.size() ? 0 : 1;
  for (std::size_t i = 0; i < token.size(); ++i) {
    difference |= static_cast<unsigned char>((i < given.size() ? given[i] : 0) ^ token[i]);
  }
  return difference == 0;
}

// What a handler answers before it is written to the connection. `code` is the wire error code
// of an error answer (it decides Retry-After).
struct Answer {
  int status = 200;
  std::string body;
  const char* content_type = kJsonType;
  std::optional<ErrorCode> code;
};

// {"error": {code, message}}, the message made one line of valid UTF-8 by the wire's own rules.
Value error_body(ErrorCode code, std::string_view message) {
  Value body = Value::object();
  body["error"] = core::error_reply(nullptr, code, message)["error"];
  return body;
}

Answer json_answer(int status, const Value& body) {
  return Answer{status, core::to_json_text(body), kJsonType, std::nullopt};
}

Answer error_answer(ErrorCode code, std::string_view message, int status = 0) {
  Answer answer =
      json_answer(status != 0 ? status : http_status_of(code), error_body(code, message));
  answer.code = code;
  return answer;
}

void write_answer(httplib::Response& res, const Answer& answer) {
  res.status = answer.status;
  // busy clears in moments; a draining server is better left for another.
  if (answer.code == ErrorCode::kBusy) res.set_header("Retry-After", "1");
  if (answer.code == ErrorCode::kShuttingDown) res.set_header("Retry-After", "5");
  res.set_content(answer.body, answer.content_type);
}

// The wire code of an error reply; unknown names (a newer server) count as internal.
ErrorCode reply_code(const Value& reply) {
  const auto it = reply.find("error");
  if (it == reply.end() || !it->is_object()) return ErrorCode::kInternal;
  const auto code = it->find("code");
  if (code == it->end() || !code->is_string()) return ErrorCode::kInternal;
  return core::error_code_from_name(code->get<std::string>()).value_or(ErrorCode::kInternal);
}

bool reply_ok(const Value& reply) {
  const auto it = reply.find("ok");
  return it != reply.end() && it->is_boolean() && it->get<bool>();
}

// The reply's fields without the envelope (v, id, ok).
Value without_envelope(Value reply) {
  reply.erase("v");
  reply.erase("id");
  reply.erase("ok");
  return reply;
}

// A reply's fields other than the envelope and `used`: what a newer server added (a request's
// echoed tag, say) reaches an HTTP client under `metadata`, as OpenEnv replies carry it.
Value fields_besides(const Value& reply, std::initializer_list<const char*> used) {
  Value rest = without_envelope(reply);
  for (const char* key : used) rest.erase(key);
  return rest;
}

// Deepest nesting of arrays and objects in JSON text, found without parsing (strings skipped),
// so a hostile body is refused before a parser or a destructor walks into it.
std::size_t json_depth(std::string_view text) {
  std::size_t depth = 0;
  std::size_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

// A request body as JSON. An empty body is an empty object (every field absent).
core::Result<Value> parse_body(std::string_view body, std::size_t max_depth) {
  if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return Value::object();
  if (const std::size_t depth = json_depth(body); depth > max_depth) {
    return core::Error{ErrorCode::kTooLarge, "the body nests arrays and objects " +
                                                 std::to_string(depth) + " deep; at most " +
                                                 std::to_string(max_depth)};
  }
  try {
    return Value::parse(body);
  } catch (const Value::exception& e) {
    // parse_error, and out_of_range for a number no double holds (1e999).
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 2: ..." without the tag.
    if (const auto tag = what.find("] "); what.starts_with("[json.") && tag != std::string::npos) {
      what.erase(0, tag + 2);
    }
    return core::Error{ErrorCode::kBadRequest, "the body is not valid JSON: " + what};
  }
}

// OpenEnv names onto wire names: `episode_id` is the wire's `episode`, and the entries of an
// `action` object are the request's own fields (source, plan). A field given twice is refused
// rather than guessed. Other fields pass through unchanged (the server ignores unknown ones).
core::Result<Value> wire_fields(const Value& body) {
  if (!body.is_object()) {
    return core::Error{ErrorCode::kBadRequest, "the body must be a JSON object, got " +
                                                   std::string(core::value_type_name(body))};
  }
  Value out = Value::object();
  for (const auto& [key, value] : body.items()) {
    if (key != "action" && key != "episode_id") out[key] = value;
  }
  const auto take = [&](const std::string& key, const Value& value,
                        const std::string& from) -> core::Status {
    if (out.contains(key)) {
      return core::Error{ErrorCode::kBadRequest,
                         "field '" + key + "' is given twice (also as '" + from + "')"};
    }
    out[key] = value;
    return {};
  };
  if (const auto it = body.find("episode_id"); it != body.end()) {
    if (auto taken = take("episode", *it, "episode_id"); !taken) return taken.error();
  }
  if (const auto it = body.find("action"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) {
      return core::Error{ErrorCode::kBadRequest, "field 'action' must be a map, got " +
                                                     std::string(core::value_type_name(*it))};
    }
    for (const auto& [key, value] : it->items()) {
      if (auto taken = take(key, value, "action." + key); !taken) return taken.error();
    }
  }
  return out;
}

Value frame_for(core::Op op, Value fields) {
  fields["v"] = core::kProtocolVersion;
  fields["op"] = std::string(core::op_name(op));
  return fields;
}

// --- Prometheus text exposition (format 0.0.4) ---

std::string metric_name(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += ok ? c : '_';
  }
  return out;
}

std::string label_value(std::string_view text) {
  std::string out;
  for (const char c : core::to_valid_utf8(text)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string sample_value(const Value& value) {
  if (value.is_boolean()) return value.get<bool>() ? "1" : "0";
  if (value.is_number_unsigned()) return std::to_string(value.get<std::uint64_t>());
  if (value.is_number_integer()) return std::to_string(value.get<std::int64_t>());
  const double number = value.get<double>();
  if (std::isnan(number)) return "NaN";
  if (std::isinf(number)) return number > 0 ? "+Inf" : "-Inf";
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", number);
  return text;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// Families in first-seen order, each with its samples together, as the format requires.
class Exposition {
 public:
  void add(const std::string& name, const char* type, const std::string& help, const Labels& labels,
           const Value& value) {
    if (!(value.is_number() || value.is_boolean())) return;
    auto [it, fresh] = index_.try_emplace(name, families_.size());
    if (fresh) families_.push_back(Family{name, type, help, {}});
    std::string sample = name;
    if (!labels.empty()) {
      sample += '{';
      for (std::size_t i = 0; i < labels.size(); ++i) {
        if (i > 0) sample += ',';
        sample += labels[i].first + "=\"" + label_value(labels[i].second) + '"';
      }
      sample += '}';
    }
    families_[it->second].samples.push_back(sample + ' ' + sample_value(value));
  }
  std::string text() const {
    std::string out;
    for (const auto& family : families_) {
      out += "# HELP " + family.name + ' ' + family.help + '\n';
      out += "# TYPE " + family.name + ' ' + family.type + '\n';
      for (const auto& sample : family.samples) out += sample + '\n';
    }
    return out;
  }

 private:
  struct Family {
    std::string name;
    const char* type;
    std::string help;
    std::vector<std::string> samples;
  };
  std::vector<Family> families_;
  std::map<std::string, std::size_t> index_;
};

Value field_or_null(const Value& map, const char* key) {
  if (!map.is_object()) return Value();
  const auto it = map.find(key);
  return it == map.end() ? Value() : *it;
}

// Every numeric leaf of one stage's pool counters: scalars as crucible_pool_<stage>_<key>, maps
// of workers (arrays of maps) one sample per element, labelled by index and device when known.
void add_pool(Exposition& out, const std::string& stage, const Value& counters) {
  if (!counters.is_object()) return;
  const std::string prefix = "crucible_pool_" + metric_name(stage) + "_";
  for (const auto& [key, value] : counters.items()) {
    if (value.is_number() || value.is_boolean()) {
      out.add(prefix + metric_name(key), "gauge",
              "the " + stage + " pool's '" + key + "' (stats.pools." + stage + ")", {}, value);
      continue;
    }
    if (!value.is_array()) continue;
    for (std::size_t i = 0; i < value.size(); ++i) {
      const Value& element = value[i];
      if (!element.is_object()) continue;
      Labels labels{{"index", std::to_string(i)}};
      if (const Value device = field_or_null(element, "device"); device.is_number_integer()) {
        labels.emplace_back("device", std::to_string(device.get<std::int64_t>()));
      }
      for (const auto& [inner, leaf] : element.items()) {
        if (inner == "device") continue;
        out.add(prefix + metric_name(key) + "_" + metric_name(inner), "gauge",
                "each of the " + stage + " pool's " + key + ": '" + inner + "'", labels, leaf);
      }
    }
  }
}

// --- the JSON schemas of GET /schema (JSON Schema, draft 2020-12) ---

constexpr const char* kSchemaText = R"json({
  "action": {
    "title": "Action",
    "description": "One attempt: CUDA C++ compiled with NVRTC, launched as its @launch directives say (or as a structured plan).",
    "type": "object",
    "required": ["source"],
    "properties": {
      "source": {"type": "string", "description": "CUDA C++ source, non-empty, at most max_source_bytes (hello.limits) bytes of UTF-8"},
      "plan": {"type": ["array", "object", "null"], "description": "structured launch plan used instead of the @launch directives"},
      "tag": {"type": "object", "maxProperties": 8, "additionalProperties": {"type": ["string", "integer"]}, "description": "request tag (run, rollout, model...): echoed under metadata and kept in the trajectory log; a step without one carries its episode's"}
    }
  },
  "observation": {
    "title": "Observation",
    "description": "What the agent sees: after reset the task (its agent view) and the episode's budget; after a step the step's result and the best step so far. reward and done are beside it in the reply.",
    "type": "object",
    "properties": {
      "task": {"type": "object", "description": "the agent view of the task (after reset): id, description, launch rules, tensors, visible cases, reference source"},
      "max_steps": {"type": "integer", "minimum": 1},
      "step": {"type": "integer", "minimum": 0, "description": "0 after reset; the step's number after a step"},
      "reward_spec": {"type": "object", "description": "the episode's effective reward spec (after reset)"},
      "result": {
        "type": "object",
        "description": "the step result (after a step)",
        "required": ["status", "message", "reward"],
        "properties": {
          "status": {"enum": ["ok", "invalid_action", "compile_error", "launch_error", "runtime_error", "timeout", "incorrect", "hack_detected", "infra_error"]},
          "message": {"type": "string"},
          "reward": {"type": "object", "properties": {"total": {"type": "number"}, "terms": {"type": "object"}, "preset": {"type": "string"}, "infra": {"type": "boolean"}}},
          "stages": {"type": "object"},
          "compile": {"type": ["object", "null"]},
          "correctness": {"type": ["object", "null"]},
          "timing": {"type": ["object", "null"]},
          "speedup": {"type": "number"}
        }
      },
      "best": {"type": ["object", "null"], "description": "the best step so far: step, reward, base, status, speedup"}
    }
  },
  "state": {
    "title": "State",
    "description": "An episode opened through this front, as the front last saw it (GET /state?episode_id=...).",
    "type": "object",
    "required": ["episode_id", "step_count"],
    "properties": {
      "episode_id": {"type": "string"},
      "step_count": {"type": "integer", "minimum": 0, "description": "the highest step number answered"},
      "task": {"type": "string"},
      "max_steps": {"type": "integer"},
      "done": {"type": "boolean"},
      "terminated": {"type": "boolean"},
      "truncated": {"type": "boolean"},
      "best": {"type": ["object", "null"]},
      "last_step": {"type": ["object", "null"], "description": "step, status and reward of the step answered last"},
      "reward_spec": {"type": "object"}
    }
  },
  "reset": {
    "title": "ResetRequest",
    "type": "object",
    "required": ["task"],
    "properties": {
      "task": {"type": "string"},
      "seed": {"type": "integer", "minimum": 0},
      "max_steps": {"type": "integer", "minimum": 1, "maximum": 10000},
      "reward": {"type": "object"},
      "options": {"type": "object"},
      "tag": {"type": "object", "maxProperties": 8, "additionalProperties": {"type": ["string", "integer"]}, "description": "request tag (run, rollout, model...): echoed under metadata and kept in the trajectory log; a step without one carries its episode's"}
    }
  },
  "score": {
    "title": "ScoreRequest",
    "description": "POST /score takes a list of these (or {\"items\": [...]}).",
    "type": "object",
    "required": ["task", "source"],
    "properties": {
      "task": {"type": "string"},
      "source": {"type": "string"},
      "plan": {"type": ["array", "object", "null"]},
      "seed": {"type": "integer", "minimum": 0},
      "reward": {"type": "object"},
      "tag": {"type": "object", "maxProperties": 8, "additionalProperties": {"type": ["string", "integer"]}, "description": "request tag (run, rollout, model...): echoed under metadata and kept in the trajectory log; a step without one carries its episode's"}
    }
  }
})json";

constexpr const char* kEndpoints =
    "GET /healthz, /metrics, /schema, /hello, /tasks, /tasks/<id>, /state?episode_id=, /stats; "
    "POST /reset, /step, /score, /close";

// A body over --max-frame-bytes, its size known when announced (a chunked one is cut off).
Answer body_too_large(std::optional<std::uint64_t> bytes, std::size_t max_body) {
  return error_answer(ErrorCode::kTooLarge,
                      (bytes ? "request body of " + std::to_string(*bytes) + " bytes"
                             : std::string("request body")) +
                          " exceeds the limit of " + std::to_string(max_body) +
                          " bytes (--max-frame-bytes)");
}

// The announced body length: 0 when absent, nullopt when it is not a number a body can have.
std::optional<std::uint64_t> content_length(const httplib::Request& req) {
  if (!req.has_header("Content-Length")) return 0;
  const std::string text = req.get_header_value("Content-Length");
  std::uint64_t length = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), length);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) {
    return std::nullopt;
  }
  return length;
}

bool is_post_path(std::string_view path) {
  return path == "/reset" || path == "/step" || path == "/score" || path == "/close";
}

bool is_get_path(std::string_view path) {
  return path == "/healthz" || path == "/metrics" || path == "/schema" || path == "/state" ||
         path == "/hello" || path == "/stats" || path == "/tasks" || path.starts_with("/tasks/");
}

// The answer httplib's own refusals get (a request line or header it cannot read, an URI over
// its limit), in the same JSON shape as every other error.
Answer transport_error(int status) {
  if (status == 413 || status == 414 || status == 431) {
    return error_answer(ErrorCode::kTooLarge,
                        status == 414 ? "the request line is over 8192 bytes"
                                      : "the request is over the size limit",
                        status);
  }
  if (status >= 500) {
    return error_answer(ErrorCode::kInternal, "the HTTP request could not be handled", status);
  }
  return error_answer(ErrorCode::kBadRequest,
                      "the HTTP request could not be read (status " + std::to_string(status) + ")",
                      status);
}

}  // namespace

class HttpFront::Impl {
 public:
  Impl(HttpFrontOptions options, Server& server)
      : options_(std::move(options)), server_(server), schema_(Value::parse(kSchemaText)) {}

  core::Status start();
  void stop();
  std::uint16_t port() const { return port_; }
  const HttpFrontOptions& options() const { return options_; }

 private:
  // --- talking to the server ---
  std::unique_ptr<zmq::socket_t> take_socket();
  void give_back(std::unique_ptr<zmq::socket_t> socket);
  // Sends each frame (its id is set here) and waits for every reply, in the order given. A frame
  // over the server's limits gets the error the server would give, without being sent (the
  // server could not name the request in its reply). With a max_wait, replies not in by then are
  // answered `timeout`; a stopping front answers the rest `shutting_down`.
  std::vector<Value> call(std::vector<Value> frames,
                          std::optional<std::chrono::milliseconds> max_wait = std::nullopt);
  Value call_one(core::Op op, Value fields,
                 std::optional<std::chrono::milliseconds> max_wait = std::nullopt) {
    std::vector<Value> frames;
    frames.push_back(frame_for(op, std::move(fields)));
    return std::move(call(std::move(frames), max_wait).front());
  }
  std::optional<Value> refuse_frame(const std::string& bytes) const;

  // --- endpoints ---
  // Every answer goes through handle(): exceptions become `internal`, in-flight is counted.
  void handle(const httplib::Request& req, httplib::Response& res,
              const std::function<Answer()>& answer_of);
  // GETs, unknown routes and bodies refused unread are answered here; POST bodies go to post().
  httplib::Server::HandlerResponse pre_route(const httplib::Request& req, httplib::Response& res);
  void post(const httplib::Request& req, httplib::Response& res,
            const httplib::ContentReader& reader);
  Answer answer_get(const httplib::Request& req);
  Answer answer_post(const std::string& path, const std::string& body);
  Answer healthz();
  Answer metrics();
  Answer state(const httplib::Request& req);
  Answer reset(const Value& body);
  Answer step(const Value& body);
  Answer close(const Value& body);
  Answer score(const Value& body);
  Answer plain_op(core::Op op, Value fields);
  // The error answer of a wire error reply.
  Answer from_error(const Value& reply);

  // --- episodes seen, for GET /state ---
  struct Seen {
    std::string task;
    Value max_steps;
    Value reward_spec;
    std::uint64_t step_count = 0;
    bool terminated = false;
    bool truncated = false;
    bool over = false;  // a step was answered episode_done
    Value best;
    Value last_step;
    Clock::time_point last_active;
  };
  void remember(const std::string& id, Seen seen);
  void saw_step(const std::string& id, const Value& reply);
  void saw_request(const std::string& id, std::optional<ErrorCode> error);
  void forget(const std::string& id);
  std::optional<Value> state_of(const std::string& id);

  HttpFrontOptions options_;
  Server& server_;
  const Value schema_;
  std::unique_ptr<httplib::Server> http_;  // an httplib::SSLServer with TLS
  std::thread listener_;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<std::int64_t> in_flight_{0};
  std::atomic<std::int64_t> long_calls_{0};  // steps and scores waiting for the server

  std::mutex sockets_mutex_;
  std::vector<std::unique_ptr<zmq::socket_t>> idle_sockets_;

  std::mutex counters_mutex_;
  std::map<int, std::uint64_t> responses_;

  std::mutex seen_mutex_;
  std::unordered_map<std::string, Seen> seen_;
};

// ---------------------------------------------------------------------------------------------
// Talking to the server.

std::unique_ptr<zmq::socket_t> HttpFront::Impl::take_socket() {
  {
    std::lock_guard lock(sockets_mutex_);
    if (!idle_sockets_.empty()) {
      auto socket = std::move(idle_sockets_.back());
      idle_sockets_.pop_back();
      return socket;
    }
  }
  auto socket = std::make_unique<zmq::socket_t>(server_.context(), zmq::socket_type::dealer);
  socket->set(zmq::sockopt::linger, 0);
  socket->set(zmq::sockopt::sndhwm, 0);
  socket->set(zmq::sockopt::rcvhwm, 0);
  socket->connect(server_.inproc_endpoint());
  return socket;
}

void HttpFront::Impl::give_back(std::unique_ptr<zmq::socket_t> socket) {
  std::lock_guard lock(sockets_mutex_);
  idle_sockets_.push_back(std::move(socket));
}

std::optional<Value> HttpFront::Impl::refuse_frame(const std::string& bytes) const {
  // The server's own checks and words (env/server.cpp, core/msgpack_codec).
  if (bytes.size() > options_.limits.max_frame_bytes) {
    return core::error_reply(nullptr, ErrorCode::kTooLarge,
                             "frame of " + std::to_string(bytes.size()) +
                                 " bytes exceeds the limit of " +
                                 std::to_string(options_.limits.max_frame_bytes));
  }
  if (auto decoded = core::decode_msgpack(bytes, options_.limits.decode_limits()); !decoded) {
    return core::error_reply(nullptr, decoded.error().code, decoded.error().message);
  }
  return std::nullopt;
}

std::vector<Value> HttpFront::Impl::call(std::vector<Value> frames,
                                         std::optional<std::chrono::milliseconds> max_wait) {
  std::vector<Value> replies(frames.size());
  std::unordered_map<std::uint64_t, std::size_t> waiting;
  auto socket = take_socket();
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const std::uint64_t id = next_id_++;
    frames[i]["id"] = id;
    const std::string bytes = core::encode_msgpack(frames[i]);
    if (auto refused = refuse_frame(bytes)) {
      replies[i] = std::move(*refused);
      continue;
    }
    socket->send(zmq::buffer(bytes), zmq::send_flags::none);
    waiting.emplace(id, i);
  }
  const auto deadline = Clock::now() + max_wait.value_or(std::chrono::milliseconds(0));
  bool reusable = true;
  while (!waiting.empty()) {
    const bool stopping = stopping_.load();
    const bool late = max_wait && Clock::now() >= deadline;
    if (stopping || late) {
      for (const auto& [id, index] : waiting) {
        replies[index] = stopping
                             ? core::error_reply(nullptr, ErrorCode::kShuttingDown,
                                                 "the server is shutting down")
                             : core::error_reply(nullptr, ErrorCode::kTimeout,
                                                 "the server did not answer within " +
                                                     std::to_string(max_wait->count()) + " ms");
      }
      // A reply may still come: this socket must not carry it into another request.
      reusable = false;
      break;
    }
    zmq::pollitem_t item{socket->handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    zmq::message_t message;
    while (socket->recv(message, zmq::recv_flags::dontwait)) {
      auto reply = core::decode_msgpack(message.to_string_view(),
                                        core::trusted_decode_limits(message.size()));
      if (!reply || !reply->is_object()) {
        core::log_error("http front: a server reply could not be read");
        continue;
      }
      const Value id = field_or_null(*reply, "id");
      auto it = id.is_number_unsigned() ? waiting.find(id.get<std::uint64_t>()) : waiting.end();
      // A reply the server could not address names no id; with one request out it is its reply.
      if (it == waiting.end() && id.is_null() && waiting.size() == 1) it = waiting.begin();
      if (it == waiting.end()) continue;
      replies[it->second] = std::move(*reply);
      waiting.erase(it);
    }
  }
  if (reusable) give_back(std::move(socket));
  return replies;
}

// ---------------------------------------------------------------------------------------------
// Episodes seen.

void HttpFront::Impl::remember(const std::string& id, Seen seen) {
  std::lock_guard lock(seen_mutex_);
  if (seen_.size() >= options_.max_episodes) {
    const auto now = Clock::now();
    std::erase_if(seen_, [&](const auto& entry) {
      return now - entry.second.last_active > options_.episode_idle_timeout;
    });
  }
  if (seen_.size() >= options_.max_episodes && !seen_.empty()) {
    const auto oldest = std::min_element(
        seen_.begin(), seen_.end(),
        [](const auto& a, const auto& b) { return a.second.last_active < b.second.last_active; });
    seen_.erase(oldest);
  }
  seen_[id] = std::move(seen);
}

void HttpFront::Impl::saw_step(const std::string& id, const Value& reply) {
  std::lock_guard lock(seen_mutex_);
  const auto it = seen_.find(id);
  if (it == seen_.end()) return;
  Seen& seen = it->second;
  seen.last_active = Clock::now();
  const Value step = field_or_null(reply, "step");
  const std::uint64_t number = step.is_number_unsigned() ? step.get<std::uint64_t>() : 0;
  // Pipelined steps may be answered out of order: the highest number is the latest.
  if (number >= seen.step_count) {
    seen.step_count = number;
    seen.best = field_or_null(reply, "best");
    const Value result = field_or_null(reply, "result");
    seen.last_step = Value{{"step", number},
                           {"status", field_or_null(result, "status")},
                           {"reward", field_or_null(reply, "reward")}};
  }
  seen.terminated = seen.terminated || field_or_null(reply, "terminated") == Value(true);
  seen.truncated = seen.truncated || field_or_null(reply, "truncated") == Value(true);
}

void HttpFront::Impl::saw_request(const std::string& id, std::optional<ErrorCode> error) {
  if (error == ErrorCode::kUnknownEpisode) return forget(id);
  std::lock_guard lock(seen_mutex_);
  const auto it = seen_.find(id);
  if (it == seen_.end()) return;
  it->second.last_active = Clock::now();
  if (error == ErrorCode::kEpisodeDone) it->second.over = true;
}

void HttpFront::Impl::forget(const std::string& id) {
  std::lock_guard lock(seen_mutex_);
  seen_.erase(id);
}

std::optional<Value> HttpFront::Impl::state_of(const std::string& id) {
  std::lock_guard lock(seen_mutex_);
  const auto it = seen_.find(id);
  if (it == seen_.end()) return std::nullopt;
  const Seen& seen = it->second;
  if (Clock::now() - seen.last_active > options_.episode_idle_timeout) {
    seen_.erase(it);
    return std::nullopt;
  }
  return Value{{"episode_id", id},
               {"step_count", seen.step_count},
               {"task", seen.task},
               {"max_steps", seen.max_steps},
               {"done", seen.terminated || seen.truncated || seen.over},
               {"terminated", seen.terminated},
               {"truncated", seen.truncated},
               {"best", seen.best},
               {"last_step", seen.last_step},
               {"reward_spec", seen.reward_spec}};
}

// ---------------------------------------------------------------------------------------------
// Endpoints.

Answer HttpFront::Impl::from_error(const Value& reply) {
  const ErrorCode code = reply_code(reply);
  Value body = Value::object();
  body["error"] = field_or_null(reply, "error");
  Answer answer = json_answer(http_status_of(code), body);
  answer.code = code;
  return answer;
}

Answer HttpFront::Impl::plain_op(core::Op op, Value fields) {
  const Value reply = call_one(op, std::move(fields));
  if (!reply_ok(reply)) return from_error(reply);
  return json_answer(200, without_envelope(reply));
}

Answer HttpFront::Impl::healthz() {
  const Value reply =
      call_one(core::Op::kHello, Value{{"client", "healthz"}}, std::chrono::milliseconds(2000));
  if (!reply_ok(reply)) {
    Value body = Value{{"status", "unhealthy"}};
    body["error"] = field_or_null(reply, "error");
    Answer answer = json_answer(503, body);
    answer.code = reply_code(reply);
    return answer;
  }
  const Value stages = field_or_null(reply, "stages");
  bool every_stage = stages.is_object();
  if (every_stage) {
    for (const auto& [name, available] : stages.items()) {
      every_stage = every_stage && available == Value(true);
    }
  }
  // Serving is healthy; a stage it cannot run (no GPU) makes it degraded, still 200: such a
  // server answers every request, steps with infra_error.
  return json_answer(200, Value{{"status", every_stage ? "healthy" : "degraded"},
                                {"stages", stages},
                                {"gpus", field_or_null(reply, "gpus")},
                                {"tasks", field_or_null(reply, "tasks")},
                                {"version", field_or_null(reply, "version")}});
}

Answer HttpFront::Impl::metrics() {
  const Value reply = call_one(core::Op::kStats, Value::object(), std::chrono::milliseconds(5000));
  if (!reply_ok(reply)) return from_error(reply);
  Exposition out;
  const auto counter = [&](const char* key, const std::string& name, const std::string& help) {
    out.add(name, "counter", help, {}, field_or_null(reply, key));
  };
  const auto gauge = [&](const char* key, const std::string& name, const std::string& help) {
    out.add(name, "gauge", help, {}, field_or_null(reply, key));
  };
  gauge("uptime_s", "crucible_uptime_seconds", "Seconds since the server started.");
  counter("requests", "crucible_requests_total",
          "Request frames the server received (ZeroMQ and HTTP).");
  counter("replies", "crucible_replies_total", "Replies the server sent.");
  counter("dropped_replies", "crucible_dropped_replies_total",
          "Replies whose client had gone before they were ready.");
  // Every wire error code and every step status, so each series exists from the start.
  const Value errors = field_or_null(reply, "errors");
  for (auto code = ErrorCode::kBadRequest; code <= ErrorCode::kInternal;
       code = static_cast<ErrorCode>(static_cast<int>(code) + 1)) {
    const std::string name(core::error_code_name(code));
    const Value count = field_or_null(errors, name.c_str());
    out.add("crucible_errors_total", "counter", "Error replies by wire error code.",
            {{"code", name}}, count.is_null() ? Value(0) : count);
  }
  const Value statuses = field_or_null(reply, "statuses");
  for (auto status = core::StepStatus::kOk; status <= core::StepStatus::kInfraError;
       status = static_cast<core::StepStatus>(static_cast<int>(status) + 1)) {
    const std::string name(core::step_status_name(status));
    const Value count = field_or_null(statuses, name.c_str());
    out.add("crucible_step_statuses_total", "counter", "Steps and scores by result status.",
            {{"status", name}}, count.is_null() ? Value(0) : count);
  }
  counter("steps", "crucible_steps_total", "Episode steps answered.");
  counter("scores", "crucible_scores_total", "Stateless scores answered.");
  gauge("inflight", "crucible_inflight", "Steps and scores queued or running.");
  gauge("episodes_open", "crucible_episodes_open", "Open episodes.");
  gauge("episode_bytes", "crucible_episode_bytes", "Memory the open episodes hold, in bytes.");
  gauge("connections", "crucible_connections", "ZeroMQ clients connected now.");
  counter("accept_failures", "crucible_accept_failures_total",
          "ZeroMQ connections the system could not accept.");
  const Value stages = field_or_null(reply, "stages");
  if (stages.is_object()) {
    for (const auto& [name, available] : stages.items()) {
      out.add("crucible_stage_available", "gauge", "1 when this server can run the stage.",
              {{"stage", name}}, available);
    }
  }
  const Value log = field_or_null(reply, "log");
  out.add("crucible_log_records_total", "counter", "Trajectory records written by this run.", {},
          field_or_null(log, "records"));
  out.add("crucible_log_failed_appends_total", "counter", "Trajectory appends that failed.", {},
          field_or_null(log, "failed_appends"));
  const Value pools = field_or_null(reply, "pools");
  if (pools.is_object()) {
    for (const auto& [stage, counters] : pools.items()) add_pool(out, stage, counters);
  }
  {
    std::lock_guard lock(counters_mutex_);
    for (const auto& [status, count] : responses_) {
      out.add("crucible_http_responses_total", "counter", "HTTP responses of the front by status.",
              {{"code", std::to_string(status)}}, Value(count));
    }
  }
  out.add("crucible_http_in_flight", "gauge", "HTTP requests the front is answering now.", {},
          Value(in_flight_.load()));
  {
    std::lock_guard lock(seen_mutex_);
    out.add("crucible_http_episodes_tracked", "gauge",
            "Episodes the front remembers for GET /state.", {}, Value(seen_.size()));
  }
  return Answer{200, out.text(), kMetricsType, std::nullopt};
}

Answer HttpFront::Impl::state(const httplib::Request& req) {
  if (!req.has_param("episode_id")) {
    return error_answer(ErrorCode::kBadRequest,
                        "missing query parameter 'episode_id' (GET /state?episode_id=ep-...)");
  }
  const std::string id = req.get_param_value("episode_id");
  if (id.empty())
    return error_answer(ErrorCode::kBadRequest, "query parameter 'episode_id' is empty");
  auto state = state_of(id);
  if (!state) {
    return error_answer(ErrorCode::kUnknownEpisode,
                        "no episode '" + core::excerpt(id, 128) +
                            "' opened through this HTTP front is open (never opened here, "
                            "closed, or expired idle)");
  }
  return json_answer(200, *state);
}

Answer HttpFront::Impl::reset(const Value& body) {
  auto fields = wire_fields(body);
  if (!fields) return error_answer(fields.error().code, fields.error().message);
  const Value reply = call_one(core::Op::kReset, std::move(fields).value());
  if (!reply_ok(reply)) return from_error(reply);
  const Value episode = field_or_null(reply, "episode");
  Seen seen;
  const Value task = field_or_null(reply, "task");
  const Value task_id = field_or_null(task, "id");
  seen.task = task_id.is_string() ? task_id.get<std::string>() : std::string();
  seen.max_steps = field_or_null(reply, "max_steps");
  seen.reward_spec = field_or_null(reply, "reward_spec");
  seen.last_active = Clock::now();
  if (episode.is_string()) remember(episode.get<std::string>(), std::move(seen));
  return json_answer(200, Value{{"episode_id", episode},
                                {"observation",
                                 {{"task", task},
                                  {"step", field_or_null(reply, "step")},
                                  {"max_steps", field_or_null(reply, "max_steps")},
                                  {"reward_spec", field_or_null(reply, "reward_spec")}}},
                                {"reward", nullptr},
                                {"done", false},
                                {"metadata", fields_besides(reply, {"episode", "task", "step",
                                                                    "max_steps", "reward_spec"})}});
}

Answer HttpFront::Impl::step(const Value& body) {
  auto fields = wire_fields(body);
  if (!fields) return error_answer(fields.error().code, fields.error().message);
  const Value episode = field_or_null(*fields, "episode");
  const Value reply = call_one(core::Op::kStep, std::move(fields).value());
  if (!reply_ok(reply)) {
    if (episode.is_string()) saw_request(episode.get<std::string>(), reply_code(reply));
    return from_error(reply);
  }
  if (episode.is_string()) saw_step(episode.get<std::string>(), reply);
  const bool terminated = field_or_null(reply, "terminated") == Value(true);
  const bool truncated = field_or_null(reply, "truncated") == Value(true);
  return json_answer(
      200, Value{{"episode_id", field_or_null(reply, "episode")},
                 {"observation",
                  {{"result", field_or_null(reply, "result")},
                   {"step", field_or_null(reply, "step")},
                   {"best", field_or_null(reply, "best")}}},
                 {"reward", field_or_null(reply, "reward")},
                 {"done", terminated || truncated},
                 {"terminated", terminated},
                 {"truncated", truncated},
                 {"metadata", fields_besides(reply, {"episode", "result", "step", "best", "reward",
                                                     "terminated", "truncated"})}});
}

Answer HttpFront::Impl::close(const Value& body) {
  auto fields = wire_fields(body);
  if (!fields) return error_answer(fields.error().code, fields.error().message);
  const Value episode = field_or_null(*fields, "episode");
  const Value reply = call_one(core::Op::kClose, std::move(fields).value());
  if (episode.is_string()) {
    if (reply_ok(reply)) {
      forget(episode.get<std::string>());
    } else {
      saw_request(episode.get<std::string>(), reply_code(reply));
    }
  }
  if (!reply_ok(reply)) return from_error(reply);
  Value closed = without_envelope(reply);
  closed["episode_id"] = field_or_null(reply, "episode");
  closed.erase("episode");
  return json_answer(200, closed);
}

Answer HttpFront::Impl::score(const Value& body) {
  const Value* items = &body;
  if (body.is_object()) {
    const auto it = body.find("items");
    if (it == body.end()) {
      return error_answer(ErrorCode::kBadRequest,
                          "the body must be a list of score requests, or {\"items\": [...]}");
    }
    items = &*it;
  }
  if (!items->is_array()) {
    return error_answer(ErrorCode::kBadRequest, "the score requests must be a list, got " +
                                                    std::string(core::value_type_name(*items)));
  }
  if (items->size() > options_.limits.max_array_items) {
    return error_answer(ErrorCode::kTooLarge, "a batch of " + std::to_string(items->size()) +
                                                  " score requests; at most " +
                                                  std::to_string(options_.limits.max_array_items));
  }
  // Items that cannot become a frame are answered in place; the others go to the server at once
  // and run concurrently there, as pipelined requests of one client.
  std::vector<Value> results(items->size());
  std::vector<Value> frames;
  std::vector<std::size_t> sent;
  for (std::size_t i = 0; i < items->size(); ++i) {
    auto fields = wire_fields((*items)[i]);
    if (!fields) {
      results[i] = core::error_reply(nullptr, fields.error().code,
                                     "item " + std::to_string(i) + ": " + fields.error().message);
      continue;
    }
    frames.push_back(frame_for(core::Op::kScore, std::move(fields).value()));
    sent.push_back(i);
  }
  std::vector<Value> replies = call(std::move(frames));
  for (std::size_t k = 0; k < sent.size(); ++k) results[sent[k]] = std::move(replies[k]);
  Value list = Value::array();
  for (auto& reply : results) {
    if (reply_ok(reply)) {
      Value item = without_envelope(std::move(reply));
      item["ok"] = true;
      list.push_back(std::move(item));
    } else {
      list.push_back(Value{{"ok", false},
                           {"status", http_status_of(reply_code(reply))},
                           {"error", field_or_null(reply, "error")}});
    }
  }
  return json_answer(200, Value{{"results", std::move(list)}});
}

Answer HttpFront::Impl::answer_get(const httplib::Request& req) {
  const std::string& path = req.path;
  if (path == "/healthz") return healthz();
  if (path == "/metrics") return metrics();
  if (path == "/schema") return json_answer(200, schema_);
  if (path == "/state") return state(req);
  if (path == "/hello") {
    Value fields = Value::object();
    if (req.has_param("client")) fields["client"] = req.get_param_value("client");
    return plain_op(core::Op::kHello, std::move(fields));
  }
  if (path == "/stats") return plain_op(core::Op::kStats, Value::object());
  if (path == "/tasks") {
    Value fields = Value::object();
    if (req.has_param("category")) fields["category"] = req.get_param_value("category");
    return plain_op(core::Op::kTasks, std::move(fields));
  }
  constexpr std::string_view kTaskPrefix = "/tasks/";
  if (path.starts_with(kTaskPrefix)) {
    return plain_op(core::Op::kTask, Value{{"task", path.substr(kTaskPrefix.size())}});
  }
  return error_answer(
      ErrorCode::kUnknownOp,
      "no endpoint GET " + core::excerpt(path, 200) + "; the front has " + kEndpoints, 404);
}

Answer HttpFront::Impl::answer_post(const std::string& path, const std::string& body_text) {
  auto body = parse_body(body_text, options_.limits.max_depth + 2);
  if (!body) return error_answer(body.error().code, body.error().message);
  if (path == "/reset") return reset(*body);
  if (path == "/close") return close(*body);
  // Steps and scores hold their thread for seconds; a few threads stay free for the rest, so
  // /healthz and /metrics answer under any load.
  const std::int64_t limit = std::max(1, options_.threads - kReservedThreads);
  if (++long_calls_ > limit) {
    --long_calls_;
    return error_answer(ErrorCode::kBusy,
                        "the HTTP front has " + std::to_string(limit) +
                            " steps and scores waiting, its limit; retry later, or send many "
                            "sources at once to /score");
  }
  Answer answer;
  try {
    answer = path == "/step" ? step(*body) : score(*body);
  } catch (...) {
    --long_calls_;
    throw;
  }
  --long_calls_;
  return answer;
}

void HttpFront::Impl::handle(const httplib::Request& req, httplib::Response& res,
                             const std::function<Answer()>& answer_of) {
  ++in_flight_;
  Answer answer;
  try {
    answer = answer_of();
  } catch (const std::exception& e) {
    core::log_error(std::string("http front: ") + req.method + " " + req.path + ": " + e.what());
    answer = error_answer(ErrorCode::kInternal, std::string("internal server error: ") + e.what());
  }
  write_answer(res, answer);
  --in_flight_;
}

httplib::Server::HandlerResponse HttpFront::Impl::pre_route(const httplib::Request& req,
                                                            httplib::Response& res) {
  const std::string& method = req.method;
  // With a token, nothing but the liveness probe is answered without it.
  if (!options_.token.empty() && req.path != "/healthz" &&
      !bearer_matches(req.get_header_value("Authorization"), options_.token)) {
    handle(req, res, [&] {
      Answer answer = json_answer(
          401, Value{{"error",
                      {{"code", "unauthorized"},
                       {"message", req.has_header("Authorization")
                                       ? "the Authorization header does not carry this "
                                         "server's bearer token"
                                       : "this server needs `Authorization: Bearer <token>` "
                                         "(the token of its --http-token-file)"}}}});
      return answer;
    });
    res.set_header("WWW-Authenticate", "Bearer realm=\"crucible\"");
    res.set_header("Connection", "close");  // any body was left unread
    return httplib::Server::HandlerResponse::Handled;
  }
  if (method == "GET" || method == "HEAD") {
    handle(req, res, [&] {
      if (is_post_path(req.path)) {
        return error_answer(ErrorCode::kBadRequest, req.path + " takes POST", 405);
      }
      return answer_get(req);
    });
    if (res.status == 405) res.set_header("Allow", "POST");
    return httplib::Server::HandlerResponse::Handled;
  }
  if (method != "POST" || !is_post_path(req.path)) {
    handle(req, res, [&] {
      if (method == "POST" && is_get_path(req.path)) {
        return error_answer(ErrorCode::kBadRequest, req.path + " takes GET", 405);
      }
      if (is_post_path(req.path)) {
        return error_answer(ErrorCode::kBadRequest, req.path + " takes POST", 405);
      }
      if (is_get_path(req.path)) {
        return error_answer(ErrorCode::kBadRequest, req.path + " takes GET", 405);
      }
      return error_answer(ErrorCode::kUnknownOp,
                          "no endpoint " + core::excerpt(method, 16) + " " +
                              core::excerpt(req.path, 200) + "; the front has " + kEndpoints,
                          404);
    });
    if (res.status == 405) res.set_header("Allow", is_post_path(req.path) ? "POST" : "GET");
    res.set_header("Connection", "close");  // any body was left unread
    return httplib::Server::HandlerResponse::Handled;
  }
  // Refused before the body is read: an announced length over the limit, and bodies httplib
  // would decompress or split (the limit counts the bytes a client sends as JSON).
  const std::size_t max_body = options_.limits.max_frame_bytes;
  std::optional<Answer> refusal;
  const auto length = content_length(req);
  if (!length) {
    refusal = error_answer(ErrorCode::kBadRequest,
                           "Content-Length '" +
                               core::excerpt(req.get_header_value("Content-Length"), 32) +
                               "' is not a byte count");
  } else if (*length > max_body) {
    refusal = body_too_large(*length, max_body);
  } else if (const std::string encoding = req.get_header_value("Content-Encoding");
             !encoding.empty() && encoding != "identity") {
    refusal = error_answer(ErrorCode::kBadRequest,
                           "Content-Encoding '" + core::excerpt(encoding, 64) +
                               "' is not accepted; send the body as plain JSON",
                           415);
  } else if (req.get_header_value("Content-Type").starts_with("multipart/")) {
    refusal = error_answer(ErrorCode::kBadRequest,
                           "a multipart body is not accepted; send the body as JSON", 415);
  }
  if (!refusal) return httplib::Server::HandlerResponse::Unhandled;
  handle(req, res, [&] { return *refusal; });
  res.set_header("Connection", "close");
  return httplib::Server::HandlerResponse::Handled;
}

void HttpFront::Impl::post(const httplib::Request& req, httplib::Response& res,
                           const httplib::ContentReader& reader) {
  const std::size_t max_body = options_.limits.max_frame_bytes;
  handle(req, res, [&] {
    // Counted as it arrives, so a chunked body cannot grow past the limit either.
    std::string body;
    bool over = false;
    const bool read = reader([&](const char* data, std::size_t size) {
      if (body.size() + size > max_body) {
        over = true;
        return false;
      }
      body.append(data, size);
      return true;
    });
    if (over) {
      res.set_header("Connection", "close");
      return body_too_large(std::nullopt, max_body);
    }
    if (!read) {
      res.set_header("Connection", "close");
      return error_answer(ErrorCode::kBadRequest,
                          "the request body could not be read to its end (a malformed chunk, "
                          "or the connection closed early)");
    }
    return answer_post(req.path, body);
  });
}

core::Status HttpFront::Impl::start() {
  const bool tls = !options_.tls_cert.empty() || !options_.tls_key.empty();
  if (tls) {
    if (options_.tls_cert.empty() || options_.tls_key.empty()) {
      return core::Error{ErrorCode::kInvalidArgument,
                         "HTTPS needs both a certificate and its private key"};
    }
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    auto secure =
        std::make_unique<httplib::SSLServer>(options_.tls_cert.c_str(), options_.tls_key.c_str());
    if (!secure->is_valid()) {
      return core::Error{ErrorCode::kInvalidArgument,
                         "cannot load the TLS certificate " + options_.tls_cert.string() +
                             " and key " + options_.tls_key.string() +
                             " (PEM files, the key matching the certificate)"};
    }
    http_ = std::move(secure);
#else
    return core::Error{ErrorCode::kInvalidArgument,
                       "this build's HTTP library has no TLS (cpp-httplib without OpenSSL)"};
#endif
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  const int threads = std::max(1, options_.threads);
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.limits.max_frame_bytes);
  // httplib's default also sets SO_REUSEPORT, which lets a second server take the same port and
  // share its connections without a word; SO_REUSEADDR alone lets a restart bind at once.
  http_->set_socket_options([](int socket) {
    int yes = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  const std::size_t max_body = options_.limits.max_frame_bytes;
  // A client that waits for 100-continue is told before it sends a body over the limit.
  // (httplib writes the response as it stands for any status but 100 and 417.)
  http_->set_expect_100_continue_handler(
      [max_body](const httplib::Request& req, httplib::Response& res) {
        const auto length = content_length(req);
        if (!length || *length <= max_body) return 100;
        write_answer(res, body_too_large(*length, max_body));
        res.set_header("Connection", "close");
        return 413;
      });
  http_->set_pre_routing_handler(
      [this](const httplib::Request& req, httplib::Response& res) { return pre_route(req, res); });
  for (const char* path : {"/reset", "/step", "/score", "/close"}) {
    http_->Post(path, [this](const httplib::Request& req, httplib::Response& res,
                             const httplib::ContentReader& reader) { post(req, res, reader); });
  }
  http_->set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        write_answer(res, transport_error(res.status));
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_->set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown exception";
        try {
          if (error) std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        core::log_error("http front: " + req.method + " " + req.path + ": " + what);
        write_answer(res, error_answer(ErrorCode::kInternal, "internal server error: " + what));
      });
  http_->set_logger([this](const httplib::Request&, const httplib::Response& res) {
    std::lock_guard lock(counters_mutex_);
    ++responses_[res.status];
  });

  const auto& address = options_.address;
  const int bound =
      address.port == 0
          ? http_->bind_to_any_port(address.host)
          : (http_->bind_to_port(address.host, address.port) ? static_cast<int>(address.port) : -1);
  if (bound < 0) {
    return core::Error{ErrorCode::kIo, "cannot serve HTTP on " +
                                           url_of(address.host, address.port, tls) + ": " +
                                           std::strerror(errno)};
  }
  port_ = static_cast<std::uint16_t>(bound);
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  // stop() only takes effect once the listener runs; wait for it, briefly.
  for (int i = 0; i < 2000 && !http_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return {};
}

void HttpFront::Impl::stop() {
  stopping_.store(true);
  if (listener_.joinable() && http_) {
    http_->stop();
    listener_.join();
  }
  std::lock_guard lock(sockets_mutex_);
  idle_sockets_.clear();
}

core::Result<std::unique_ptr<HttpFront>> HttpFront::start(HttpFrontOptions options,
                                                          Server& server) {
  auto impl = std::make_unique<Impl>(std::move(options), server);
  if (auto started = impl->start(); !started) return started.error();
  return std::unique_ptr<HttpFront>(new HttpFront(std::move(impl)));
}

HttpFront::HttpFront(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpFront::~HttpFront() { impl_->stop(); }
std::uint16_t HttpFront::port() const { return impl_->port(); }
std::string HttpFront::url() const {
  const auto& options = impl_->options();
  return url_of(options.address.host, impl_->port(), !options.tls_cert.empty());
}

bool http_front_has_tls() {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  return true;
#else
  return false;
#endif
}
void HttpFront::stop() { impl_->stop(); }

}  // namespace crucible::env
