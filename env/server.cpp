// Server implementation. Threads: one loop thread owns the ROUTER socket and all episode
// bookkeeping that must be ordered; N worker threads run the pipeline and send their replies
// back to the loop through an inproc PUSH/PULL pair (ZeroMQ sockets are single-threaded).
#include "env/server.hpp"

#include <sys/resource.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
#include "core/text.hpp"
#include "env/episodes.hpp"
#include "env/step_record.hpp"
#include "env/trajectory_log.hpp"

#ifndef CRUCIBLE_VERSION
#define CRUCIBLE_VERSION "0.0.0"
#endif

namespace crucible::env {

using core::ErrorCode;
using core::Value;
using Clock = std::chrono::steady_clock;

bool is_local_endpoint(std::string_view endpoint) {
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) return true;
  if (!endpoint.starts_with("tcp://")) return false;
  std::string_view host = endpoint.substr(6);
  if (host.starts_with("[")) {
    const auto close = host.find(']');
    return close != std::string_view::npos && host.substr(1, close - 1) == "::1";
  }
  host = host.substr(0, host.rfind(':'));
  if (host == "localhost") return true;
  if (!host.starts_with("127.")) return false;
  // Only digits and dots: "127.0.0.1", not "127.example.com".
  return host.find_first_not_of("0123456789.") == std::string_view::npos;
}

core::Status check_endpoint(std::string_view endpoint) {
  const auto refuse = [&](const std::string& why) {
    return core::Error{ErrorCode::kInvalidArgument,
                       "'" + core::excerpt(endpoint, 200) + "' is not a ZeroMQ endpoint: " + why +
                           " (examples: tcp://127.0.0.1:5555, tcp://[::1]:5555, "
                           "ipc:///tmp/crucible.sock)"};
  };
  if (endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://")) {
    if (endpoint.substr(endpoint.find("://") + 3).empty()) return refuse("the address is empty");
    return {};
  }
  if (!endpoint.starts_with("tcp://"))
    return refuse("it must start with tcp://, ipc:// or inproc://");
  const std::string_view address = endpoint.substr(6);
  const auto colon = address.rfind(':');
  if (colon == std::string_view::npos || colon == 0) return refuse("a tcp address is HOST:PORT");
  const std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.starts_with('[') != host.ends_with(']')) return refuse("unbalanced brackets");
  if (port != "*") {
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string_view::npos ||
        std::stoul(std::string(port)) > 65535) {
      return refuse("the port must be 0-65535 or *");
    }
  }
  return {};
}

namespace {

// The endpoint handed to ZeroMQ: it binds interfaces and addresses, not host names, so the
// documented `localhost` becomes 127.0.0.1.
std::string bind_address(const std::string& endpoint) {
  constexpr std::string_view kLocalhost = "tcp://localhost:";
  if (endpoint.starts_with(kLocalhost)) {
    return "tcp://127.0.0.1:" + endpoint.substr(kLocalhost.size());
  }
  return endpoint;
}

// Routing frames of a request (identity, and the empty delimiter REQ sockets add) kept so the
// reply can be addressed.
struct Route {
  std::vector<std::string> frames;
};

// A bounded queue of closures run by a fixed set of threads.
class WorkQueue {
 public:
  explicit WorkQueue(std::size_t capacity) : capacity_(capacity) {}
  bool try_push(std::function<void()> job) {
    std::lock_guard lock(mutex_);
    if (closed_ || jobs_.size() >= capacity_) return false;
    jobs_.push_back(std::move(job));
    ready_.notify_one();
    return true;
  }
  // Blocks until a job is available or the queue is closed and empty.
  bool pop(std::function<void()>& job) {
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [&] { return closed_ || !jobs_.empty(); });
    if (jobs_.empty()) return false;
    job = std::move(jobs_.front());
    jobs_.pop_front();
    return true;
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    ready_.notify_all();
  }

 private:
  std::size_t capacity_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool closed_ = false;
};

// The ZAP handler (ZeroMQ RFC 27) of a Curve server: lets in the CURVE clients whose public key
// is on the allow-list and refuses everyone else, on a thread of its own.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, std::set<std::string> allowed)
      : socket_(context, zmq::socket_type::rep), allowed_(std::move(allowed)) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.bind("inproc://zeromq.zap.01");
    thread_ = std::thread([this] { loop(); });
  }
  ~ZapHandler() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t denied() const { return denied_.load(); }

 private:
  void loop() {
    while (!stop_.load()) {
      zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, std::chrono::milliseconds(100));
        if (!(item.revents & ZMQ_POLLIN)) continue;
        std::vector<zmq::message_t> frames;
        while (true) {
          zmq::message_t frame;
          if (!socket_.recv(frame)) break;
          const bool more = frame.more();
          frames.push_back(std::move(frame));
          if (!more) break;
        }
        answer(frames);
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) return;
        core::log_warn(std::string("authentication handler: ") + e.what());
      }
    }
  }
  // Request: version, request id, domain, address, identity, mechanism, credentials...
  // Reply: version, request id, status code, status text, user id, metadata.
  void answer(const std::vector<zmq::message_t>& frames) {
    const std::string request_id = frames.size() > 1 ? frames[1].to_string() : std::string();
    bool allowed = false;
    std::string address = frames.size() > 3 ? frames[3].to_string() : std::string();
    if (frames.size() >= 7 && frames[0].to_string_view() == "1.0" &&
        frames[5].to_string_view() == "CURVE" && frames[6].size() == 32) {
      char z85[41] = {};
      if (zmq_z85_encode(z85, static_cast<const std::uint8_t*>(frames[6].data()), 32) != nullptr) {
        allowed = allowed_.count(z85) > 0;
      }
    }
    if (!allowed) {
      ++denied_;
      const auto now = Clock::now();
      if (now - last_warning_ > std::chrono::seconds(10)) {
        last_warning_ = now;
        core::log_warn("refused a client from " + core::excerpt(address, 64) +
                       ": its key is not on the allow-list (" + std::to_string(denied_.load()) +
                       " refused so far)");
      }
    }
    const std::string code = allowed ? "200" : "400";
    const std::string text = allowed ? "OK" : "client key not allowed";
    socket_.send(zmq::str_buffer("1.0"), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(request_id), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(code), zmq::send_flags::sndmore);
    socket_.send(zmq::buffer(text), zmq::send_flags::sndmore);
    socket_.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
    socket_.send(zmq::str_buffer(""), zmq::send_flags::none);
  }

  zmq::socket_t socket_;
  std::set<std::string> allowed_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> denied_{0};
  Clock::time_point last_warning_{};
};

}  // namespace

class Server::Impl {
 public:
  Impl(ServerOptions options, const tasks::Registry& registry, Pipeline pipeline)
      : options_(std::move(options)),
        registry_(registry),
        pipeline_(std::move(pipeline)),
        context_(1),
        router_(context_, zmq::socket_type::router),
        replies_(context_, zmq::socket_type::pull),
        monitor_(context_, zmq::socket_type::pair),
        queue_(options_.max_queued),
        rng_(std::random_device{}()),
        started_(Clock::now()),
        episodes_(options_.max_episodes, options_.max_episode_bytes,
                  options_.episode_idle_timeout) {}

  core::Status start() {
    if (auto shape = check_endpoint(options_.bind); !shape) return shape.error();
    if (options_.curve_keys) {
      if (!core::is_z85_key(options_.curve_keys->public_key) ||
          !core::is_z85_key(options_.curve_keys->secret_key)) {
        return core::Error{ErrorCode::kInvalidArgument, "the server's Curve keys are not Z85 keys"};
      }
      if (options_.allowed_client_keys.empty()) {
        return core::Error{ErrorCode::kInvalidArgument,
                           "a Curve server needs the public keys of the clients it lets in "
                           "(--client-keys)"};
      }
      for (const auto& key : options_.allowed_client_keys) {
        if (!core::is_z85_key(key)) {
          return core::Error{ErrorCode::kInvalidArgument,
                             "client key '" + core::excerpt(key, 48) + "' is not a Z85 key"};
        }
      }
    }
    if (!options_.curve_keys && !options_.allow_remote && !is_local_endpoint(options_.bind)) {
      return core::Error{ErrorCode::kInvalidArgument,
                         "refusing to bind " + options_.bind +
                             " without authentication: give the server a key pair and the "
                             "clients' public keys (--server-key, --client-keys; `crucible "
                             "keys new` makes them), or pass --insecure on a closed network"};
    }
    auto log = TrajectoryLog::open(options_.log_path, options_.log_sync);
    if (!log) return log.error();
    log_ = std::move(log).value();
    if (log_->recovered_tail_bytes() > 0) {
      core::log_warn("trajectory log " + log_->path().string() + ": cut a torn tail of " +
                     std::to_string(log_->recovered_tail_bytes()) + " bytes left by a crash");
    }
    for (const auto& range : log_->damaged_ranges()) {
      core::log_warn("trajectory log " + log_->path().string() + ": bytes " +
                     std::to_string(range.offset) + "-" +
                     std::to_string(range.offset + range.bytes - 1) + " do not form a record (" +
                     range.reason + "); left in place, readers skip them, new records follow");
    }
    try {
      router_.set(zmq::sockopt::linger, 0);
      router_.set(zmq::sockopt::router_mandatory, 1);
      // Frames over this hard cap make ZeroMQ drop the connection before buffering them; frames
      // between the protocol limit and the cap are read and answered with `too_large`.
      router_.set(zmq::sockopt::maxmsgsize,
                  static_cast<std::int64_t>(options_.limits.max_frame_bytes * 4 + 4096));
      router_.set(zmq::sockopt::sndhwm, 0);
      router_.set(zmq::sockopt::rcvhwm, 0);
      if (options_.curve_keys) {
        zap_ = std::make_unique<ZapHandler>(
            context_, std::set<std::string>(options_.allowed_client_keys.begin(),
                                            options_.allowed_client_keys.end()));
        router_.set(zmq::sockopt::curve_server, 1);
        router_.set(zmq::sockopt::curve_secretkey, options_.curve_keys->secret_key);
        router_.set(zmq::sockopt::zap_domain, "crucible");
      }
      const std::string bind = bind_address(options_.bind);
      if (bind.find('[') != std::string::npos) router_.set(zmq::sockopt::ipv6, 1);
      router_.bind(bind);
      endpoint_ = router_.get(zmq::sockopt::last_endpoint);
      router_.bind(inproc_endpoint_);
      replies_endpoint_ = "inproc://crucible-replies";
      replies_.set(zmq::sockopt::linger, 0);
      replies_.set(zmq::sockopt::rcvhwm, 0);
      replies_.bind(replies_endpoint_);
      // Connection events, so a client the OS cannot accept (out of file descriptors) is seen
      // and counted instead of waiting unnoticed.
      const std::string monitor_endpoint = "inproc://crucible-connections";
      if (zmq_socket_monitor(
              router_.handle(), monitor_endpoint.c_str(),
              ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_ACCEPT_FAILED | ZMQ_EVENT_DISCONNECTED) != 0) {
        throw zmq::error_t();
      }
      monitor_.set(zmq::sockopt::linger, 0);
      monitor_.connect(monitor_endpoint);
    } catch (const zmq::error_t& e) {
      return core::Error{ErrorCode::kIo, "cannot bind " + options_.bind + ": " + e.what()};
    }
    int workers = options_.workers;
    if (workers <= 0) workers = std::max(2u, std::thread::hardware_concurrency());
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_main(); });
    return {};
  }

  ~Impl() {
    zap_.reset();
    queue_.close();
    for (auto& thread : threads_) {
      if (thread.joinable()) thread.join();
    }
  }

  const std::string& endpoint() const { return endpoint_; }
  const std::string& inproc_endpoint() const { return inproc_endpoint_; }
  zmq::context_t& context() { return context_; }
  void stop() { stop_requested_.store(true); }
  void run();

 private:
  // --- loop thread ---
  void handle_request(Route route, const std::string& payload);
  void dispatch(const Route& route, const Value& id, core::Op op, const Value& frame);
  void send(const Route& route, const Value& reply);
  void send_error(const Route& route, const Value& id, ErrorCode code, const std::string& message);
  void forward_replies();
  void read_connection_events();
  Value hello_reply(const Value& id) const;
  Value stats_reply(const Value& id) const;
  void start_job(const Route& route, const Value& id, core::Op op, StepJob job,
                 std::shared_ptr<Episode> episode, std::uint32_t step);
  const tasks::Task* find_task(const Route& route, const Value& id, const std::string& name);

  // --- worker threads ---
  void worker_main();

  void count_error(ErrorCode code) {
    std::lock_guard lock(stats_mutex_);
    ++errors_[std::string(core::error_code_name(code))];
  }

  ServerOptions options_;
  const tasks::Registry& registry_;
  ModelCatalog models_{registry_};
  Pipeline pipeline_;
  zmq::context_t context_;
  zmq::socket_t router_;
  zmq::socket_t replies_;
  zmq::socket_t monitor_;  // connection events of router_
  std::string endpoint_;
  std::string replies_endpoint_;
  // A second bind of router_ for in-process fronts; the name is private to this context.
  const std::string inproc_endpoint_ = "inproc://crucible-front";
  std::unique_ptr<TrajectoryLog> log_;
  std::unique_ptr<ZapHandler> zap_;  // with Curve keys: who may connect
  WorkQueue queue_;
  std::vector<std::thread> threads_;
  std::mt19937_64 rng_;
  Clock::time_point started_;
  std::atomic<bool> stop_requested_{false};

  // Episodes are created, reserved and erased by the loop thread; workers update their counts.
  Episodes episodes_;

  std::atomic<std::uint64_t> requests_{0};
  std::atomic<std::uint64_t> replies_sent_{0};
  std::atomic<std::uint64_t> dropped_replies_{0};
  std::atomic<std::uint64_t> inflight_{0};
  std::atomic<std::uint64_t> steps_{0};
  std::atomic<std::int64_t> connections_{0};
  std::atomic<std::uint64_t> accept_failures_{0};
  Clock::time_point last_accept_warning_{};
  std::atomic<std::uint64_t> scores_{0};
  mutable std::mutex stats_mutex_;
  std::map<std::string, std::uint64_t> errors_;
  std::map<std::string, std::uint64_t> statuses_;
};

void Server::Impl::run() {
  core::log_info("listening on " + endpoint_);
  bool draining = false;
  Clock::time_point drain_deadline;
  Clock::time_point next_sweep = Clock::now() + std::chrono::seconds(1);
  Clock::time_point next_events = Clock::now();
  while (true) {
    if (!draining && stop_requested_.load()) {
      draining = true;
      drain_deadline = Clock::now() + options_.drain_timeout;
      core::log_info("stopping: " + std::to_string(inflight_.load()) +
                     " requests in flight; new requests are refused");
    }
    if (draining && (inflight_.load() == 0 || Clock::now() >= drain_deadline)) break;
    zmq::pollitem_t items[] = {{router_.handle(), 0, ZMQ_POLLIN, 0},
                               {replies_.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 2, std::chrono::milliseconds(50));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw;
    }
    if (items[1].revents & ZMQ_POLLIN) forward_replies();
    // Connection events are read ten times a second, not as they come: out of file
    // descriptors, libzmq retries the accept in a loop and reports every failure.
    if (Clock::now() >= next_events) {
      read_connection_events();
      next_events = Clock::now() + std::chrono::milliseconds(100);
    }
    if (items[0].revents & ZMQ_POLLIN) {
      // Read a bounded batch so replies keep flowing under a flood of requests.
      for (int i = 0; i < 256; ++i) {
        std::vector<zmq::message_t> parts;
        zmq::message_t part;
        bool got = false;
        try {
          while (true) {
            const auto received = router_.recv(part, zmq::recv_flags::dontwait);
            if (!received) break;
            got = true;
            const bool more = part.more();
            parts.push_back(std::move(part));
            if (!more) break;
          }
        } catch (const zmq::error_t& e) {
          core::log_warn(std::string("receive failed: ") + e.what());
          break;
        }
        if (!got) break;
        ++requests_;
        Route route;
        if (parts.size() == 2) {
          route.frames.push_back(parts[0].to_string());
        } else if (parts.size() == 3 && parts[1].size() == 0) {
          route.frames.push_back(parts[0].to_string());
          route.frames.emplace_back();
        } else {
          route.frames.push_back(parts[0].to_string());
          send_error(route, nullptr, ErrorCode::kBadRequest,
                     "a request must be one frame holding one msgpack map, got " +
                         std::to_string(parts.size() - 1) + " frames");
          continue;
        }
        if (draining) {
          const auto frame =
              core::decode_msgpack(parts.back().to_string_view(), options_.limits.decode_limits());
          const Value id = frame ? core::recover_id(*frame, options_.limits) : Value(nullptr);
          send_error(route, id, ErrorCode::kShuttingDown, "the server is shutting down");
          continue;
        }
        try {
          handle_request(std::move(route), parts.back().to_string());
        } catch (const std::exception& e) {
          // One bad request must never take the server down.
          core::log_error(std::string("request handler failed: ") + e.what());
        }
      }
    }
    if (Clock::now() >= next_sweep) {
      episodes_.expire();
      next_sweep = Clock::now() + std::chrono::seconds(1);
    }
  }
  queue_.close();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  forward_replies();
  core::log_info("stopped; " + std::to_string(log_->records_written()) +
                 " trajectory records written to " + log_->path().string());
}

void Server::Impl::handle_request(Route route, const std::string& payload) {
  if (payload.size() > options_.limits.max_frame_bytes) {
    // The frame is already in memory (ZeroMQ capped it at 4x the limit): decode it once more,
    // leniently, only to address the reply to its id.
    core::DecodeLimits lenient = options_.limits.decode_limits();
    lenient.max_bytes = payload.size();
    lenient.max_str_bytes = static_cast<std::uint32_t>(payload.size());
    lenient.max_bin_bytes = static_cast<std::uint32_t>(payload.size());
    const auto oversized = core::decode_msgpack(payload, lenient);
    const Value id = oversized ? core::recover_id(*oversized, options_.limits) : Value(nullptr);
    send_error(route, id, ErrorCode::kTooLarge,
               "frame of " + std::to_string(payload.size()) + " bytes exceeds the limit of " +
                   std::to_string(options_.limits.max_frame_bytes));
    return;
  }
  auto frame = core::decode_msgpack(payload, options_.limits.decode_limits());
  if (!frame) {
    send_error(route, nullptr, frame.error().code, frame.error().message);
    return;
  }
  auto envelope = core::parse_envelope(*frame, options_.limits);
  if (!envelope) {
    send_error(route, core::recover_id(*frame, options_.limits), envelope.error().code,
               envelope.error().message);
    return;
  }
  try {
    dispatch(route, envelope->id, envelope->op, *frame);
  } catch (const std::exception& e) {
    core::log_error(std::string("internal error in ") + std::string(core::op_name(envelope->op)) +
                    ": " + e.what());
    send_error(route, envelope->id, ErrorCode::kInternal,
               std::string("internal server error: ") + e.what());
  }
}

const tasks::Task* Server::Impl::find_task(const Route& route, const Value& id,
                                           const std::string& name) {
  const tasks::Task* task = registry_.find(name);
  if (task == nullptr) {
    send_error(route, id, ErrorCode::kUnknownTask,
               "unknown task '" + name + "'; the `tasks` op lists the " +
                   std::to_string(registry_.all().size()) + " tasks this server has");
  }
  return task;
}

void Server::Impl::dispatch(const Route& route, const Value& id, core::Op op, const Value& frame) {
  const auto& limits = options_.limits;
  switch (op) {
    case core::Op::kHello: {
      auto request = core::parse_hello(frame, limits);
      if (!request) return send_error(route, id, request.error().code, request.error().message);
      return send(route, hello_reply(id));
    }
    case core::Op::kStats:
      return send(route, stats_reply(id));
    case core::Op::kTasks: {
      auto request = core::parse_tasks(frame, limits);
      if (!request) return send_error(route, id, request.error().code, request.error().message);
      Value list = Value::array();
      for (const auto& task : registry_.all()) {
        if (request->category && task.category != *request->category) continue;
        list.push_back(tasks::task_summary(task));
      }
      Value reply = core::ok_reply(id);
      reply["tasks"] = std::move(list);
      return send(route, reply);
    }
    case core::Op::kTask: {
      auto request = core::parse_task(frame, limits);
      if (!request) return send_error(route, id, request.error().code, request.error().message);
      const auto* task = find_task(route, id, request->task);
      if (task == nullptr) return;
      Value reply = core::ok_reply(id);
      reply["task"] = tasks::agent_view(*task);
      return send(route, reply);
    }
    case core::Op::kReset: {
      auto request = core::parse_reset(frame, limits);
      if (!request) return send_error(route, id, request.error().code, request.error().message);
      const auto* task = find_task(route, id, request->task);
      if (task == nullptr) return;
      auto spec = rewards::parse_reward_spec(request->reward);
      if (!spec) return send_error(route, id, ErrorCode::kInvalidArgument, spec.error().message);
      auto episode = std::make_shared<Episode>();
      episode->task = task;
      episode->seed = request->seed ? *request->seed : rng_();
      episode->max_steps = request->max_steps ? *request->max_steps : options_.default_max_steps;
      episode->reward_spec = std::move(spec).value();
      episode->reward_spec_value = rewards::reward_spec_to_value(episode->reward_spec);
      episode->options = request->options.is_null() ? Value::object() : request->options;
      if (const auto bytes = core::encode_msgpack(episode->options).size();
          bytes > options_.max_options_bytes) {
        return send_error(route, id, ErrorCode::kTooLarge,
                          "field 'options' holds " + std::to_string(bytes) +
                              " bytes; an episode keeps at most " +
                              std::to_string(options_.max_options_bytes));
      }
      if (const auto it = episode->options.find("stop_on_ok"); it != episode->options.end()) {
        if (!it->is_boolean()) {
          return send_error(route, id, ErrorCode::kBadRequest,
                            "field 'options.stop_on_ok' must be a boolean, got " +
                                std::string(core::value_type_name(*it)));
        }
        episode->stop_on_ok = it->get<bool>();
      }
      episode->tag = std::move(request->tag);
      if (!request->model.is_null()) {
        auto model = models_.resolve(request->model, *task);
        if (!model) return send_error(route, id, model.error().code, model.error().message);
        episode->model = std::move(model).value();
      }
      episode->last_active = Clock::now();
      if (auto opened = episodes_.open(episode, rng_); !opened) {
        return send_error(route, id, opened.error().code, opened.error().message);
      }
      Value reply = core::ok_reply(id);
      reply["episode"] = episode->id;
      reply["task"] = tasks::agent_view(*task);
      reply["max_steps"] = episode->max_steps;
      if (episode->model) reply["model"] = episode->model->to_value();
      reply["step"] = 0;
      reply["reward_spec"] = episode->reward_spec_value;
      if (!episode->tag.is_null()) reply["tag"] = episode->tag;
      return send(route, reply);
    }
    case core::Op::kStep: {
      auto request = core::parse_step(frame, limits);
      if (!request) return send_error(route, id, request.error().code, request.error().message);
      auto begun = episodes_.begin_step(request->episode);
      if (!begun) return send_error(route, id, begun.error().code, begun.error().message);
      auto [episode, step] = std::move(begun).value();
      StepJob job{episode->task,
                  std::move(request->source),
                  std::move(request->plan),
                  episode->seed,
                  episode->reward_spec,
                  request->tag.is_null() ? episode->tag : std::move(request->tag),
                  episode->model};
      return start_job(route, id, op, std::move(job), std::move(episode), step);
    }
    case core::Op::kScore: {
      auto request = core::parse_score(frame, limits);
      if (!request) return send_error(route, id, request.error().code, request.error().message);
      const auto* task = find_task(route, id, request->task);
      if (task == nullptr) return;
      auto spec = rewards::parse_reward_spec(request->reward);
      if (!spec) return send_error(route, id, ErrorCode::kInvalidArgument, spec.error().message);
      std::optional<ModelRequest> model;
      if (!request->model.is_null()) {
        auto resolved = models_.resolve(request->model, *task);
        if (!resolved) {
          return send_error(route, id, resolved.error().code, resolved.error().message);
        }
        model = std::move(resolved).value();
      }
      StepJob job{task,
                  std::move(request->source),
                  std::move(request->plan),
                  request->seed ? *request->seed : rng_(),
                  std::move(spec).value(),
                  std::move(request->tag),
                  std::move(model)};
      return start_job(route, id, op, std::move(job), nullptr, 0);
    }
    case core::Op::kClose: {
      auto request = core::parse_close(frame, limits);
      if (!request) return send_error(route, id, request.error().code, request.error().message);
      auto closed = episodes_.close(request->episode);
      if (!closed) return send_error(route, id, closed.error().code, closed.error().message);
      Value reply = core::ok_reply(id);
      reply["episode"] = closed->id;
      reply["steps"] = closed->steps;
      reply["best"] = closed->best;
      return send(route, reply);
    }
  }
}

void Server::Impl::start_job(const Route& route, const Value& id, core::Op op, StepJob job,
                             std::shared_ptr<Episode> episode, std::uint32_t step) {
  ++inflight_;
  auto work = [this, route, id, op, job = std::move(job), episode, step]() {
    StepResult result = pipeline_.run(job);
    const double base = result.reward.base;
    if (episode && job.reward_spec.improvement) {
      result.reward = episodes_.shape_reward(*episode, job.reward_spec, result.reward);
    }
    Value record = step_record(op, job, result, options_.arch, options_.gpus,
                               episode ? episode->id : std::string(), step);
    {
      std::lock_guard lock(stats_mutex_);
      ++statuses_[std::string(core::step_status_name(result.status))];
    }
    // The record is in the log before the reply leaves, so an answered step is never lost; a
    // step that cannot be logged is answered as an error and leaves its episode as it was.
    if (auto logged = log_->append(record); !logged) {
      core::log_error("trajectory log append failed: " + logged.error().message);
      if (episode) episodes_.step_not_logged(*episode);
      return std::make_pair(
          route,
          core::error_reply(id, ErrorCode::kInternal,
                            "the step ran but could not be logged (" + logged.error().message +
                                "); it did not count against the episode; retry later"));
    }
    Value reply = core::ok_reply(id);
    reply["result"] = std::move(record["result"]);
    reply["reward"] = result.reward.total;
    if (!job.tag.is_null()) reply["tag"] = job.tag;
    if (!episode) {
      reply["task"] = job.task->id;
      ++scores_;
      return std::make_pair(route, std::move(reply));
    }
    const StepEnd end =
        episodes_.finish_step(*episode, step, result, base, job.reward_spec.improvement);
    reply["episode"] = episode->id;
    reply["step"] = step;
    reply["terminated"] = end.terminated;
    reply["truncated"] = end.truncated;
    reply["best"] = end.best;
    ++steps_;
    return std::make_pair(route, std::move(reply));
  };
  // The closure is wrapped so the worker thread can send through its own socket.
  auto wrapped = [this, work = std::move(work)]() mutable {
    auto [reply_route, reply] = work();
    thread_local std::unique_ptr<zmq::socket_t> push;
    if (!push) {
      push = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::push);
      push->set(zmq::sockopt::linger, 0);
      push->set(zmq::sockopt::sndhwm, 0);
      push->connect(replies_endpoint_);
    }
    for (const auto& frame : reply_route.frames) {
      push->send(zmq::buffer(frame), zmq::send_flags::sndmore);
    }
    const std::string payload = core::encode_reply(std::move(reply));
    push->send(zmq::buffer(payload), zmq::send_flags::none);
  };
  if (!queue_.try_push(std::move(wrapped))) {
    --inflight_;
    if (episode) episodes_.cancel_step(*episode);
    send_error(route, id, ErrorCode::kBusy,
               "the server has " + std::to_string(options_.max_queued) +
                   " requests queued, its limit; retry later");
  }
}

void Server::Impl::worker_main() {
  std::function<void()> job;
  while (queue_.pop(job)) {
    try {
      job();
    } catch (const std::exception& e) {
      core::log_error(std::string("worker job failed: ") + e.what());
    }
    job = nullptr;
  }
}

void Server::Impl::read_connection_events() {
  // Bounded, so a storm of failed accepts cannot starve the request loop. Events past the
  // monitor's queue limit are dropped by libzmq, so counts are approximate during a storm.
  for (int i = 0; i < 4096; ++i) {
    zmq::message_t event;
    zmq::message_t address;
    if (!monitor_.recv(event, zmq::recv_flags::dontwait)) return;
    if (event.more()) (void)monitor_.recv(address, zmq::recv_flags::dontwait);
    if (event.size() < 6) continue;
    std::uint16_t kind = 0;
    std::uint32_t value = 0;
    std::memcpy(&kind, event.data(), sizeof kind);
    std::memcpy(&value, static_cast<const char*>(event.data()) + 2, sizeof value);
    if (kind == ZMQ_EVENT_ACCEPTED) {
      ++connections_;
    } else if (kind == ZMQ_EVENT_DISCONNECTED) {
      --connections_;
    } else if (kind == ZMQ_EVENT_ACCEPT_FAILED) {
      ++accept_failures_;
      if (Clock::now() - last_accept_warning_ > std::chrono::seconds(10)) {
        last_accept_warning_ = Clock::now();
        rlimit files{};
        ::getrlimit(RLIMIT_NOFILE, &files);
        core::log_error("cannot accept a client connection (" +
                        std::string(std::strerror(static_cast<int>(value))) + ") with " +
                        std::to_string(connections_.load()) + " clients connected and " +
                        std::to_string(files.rlim_cur) +
                        " open files allowed: clients past that wait unanswered; raise the "
                        "limit (ulimit -n) or spread clients over more servers");
      }
    }
  }
}

void Server::Impl::forward_replies() {
  while (true) {
    std::vector<zmq::message_t> parts;
    zmq::message_t part;
    bool got = false;
    while (true) {
      const auto received = replies_.recv(part, zmq::recv_flags::dontwait);
      if (!received) break;
      got = true;
      const bool more = part.more();
      parts.push_back(std::move(part));
      if (!more) break;
    }
    if (!got) return;
    --inflight_;
    try {
      for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        router_.send(parts[i], zmq::send_flags::sndmore);
      }
      router_.send(parts.back(), zmq::send_flags::none);
      ++replies_sent_;
    } catch (const zmq::error_t& e) {
      // EHOSTUNREACH: the client left before its reply was ready (ROUTER_MANDATORY).
      ++dropped_replies_;
      core::log_debug(std::string("reply dropped: ") + e.what());
    }
  }
}

void Server::Impl::send(const Route& route, const Value& reply) {
  const std::string payload = core::encode_reply(reply);
  try {
    for (const auto& frame : route.frames)
      router_.send(zmq::buffer(frame), zmq::send_flags::sndmore);
    router_.send(zmq::buffer(payload), zmq::send_flags::none);
    ++replies_sent_;
  } catch (const zmq::error_t& e) {
    ++dropped_replies_;
    core::log_debug(std::string("reply dropped: ") + e.what());
  }
}

void Server::Impl::send_error(const Route& route, const Value& id, ErrorCode code,
                              const std::string& message) {
  count_error(code);
  send(route, core::error_reply(id, code, message));
}

Value Server::Impl::hello_reply(const Value& id) const {
  Value reply = core::ok_reply(id);
  reply["server"] = "crucible";
  reply["version"] = CRUCIBLE_VERSION;
  reply["protocol"] = core::kProtocolVersion;
  reply["arch"] = options_.arch;
  reply["gpus"] = options_.gpus;
  reply["auth"] = options_.curve_keys ? "curve" : "none";
  reply["stages"] = pipeline_.describe();
  reply["limits"] = Value{{"max_frame_bytes", options_.limits.max_frame_bytes},
                          {"max_source_bytes", options_.limits.max_source_bytes},
                          {"max_steps_cap", options_.limits.max_steps_cap}};
  reply["tasks"] = registry_.all().size();
  return reply;
}

Value Server::Impl::stats_reply(const Value& id) const {
  Value reply = core::ok_reply(id);
  const std::chrono::duration<double> uptime = Clock::now() - started_;
  reply["uptime_s"] = uptime.count();
  reply["requests"] = requests_.load();
  reply["replies"] = replies_sent_.load();
  reply["dropped_replies"] = dropped_replies_.load();
  reply["connections"] = connections_.load();
  reply["accept_failures"] = accept_failures_.load();
  // Connections refused by the Curve allow-list (absent without Curve).
  if (zap_) reply["auth_denied"] = zap_->denied();
  reply["inflight"] = inflight_.load();
  reply["steps"] = steps_.load();
  reply["scores"] = scores_.load();
  {
    std::lock_guard lock(stats_mutex_);
    reply["errors"] = errors_;
    reply["statuses"] = statuses_;
  }
  {
    const Episodes::Usage usage = episodes_.usage();
    reply["episodes_open"] = usage.open;
    reply["episode_bytes"] = usage.bytes;
  }
  reply["stages"] = pipeline_.describe();
  // Per stage: the compile pool's and the GPU runners' counters, queue depths and (GPU)
  // utilisation, so a trainer sees where steps wait.
  reply["pools"] = pipeline_.stats();
  // Counts only: the log's host path is the operator's business, not every client's.
  reply["log"] =
      Value{{"records", log_->records_written()}, {"failed_appends", log_->failed_appends()}};
  return reply;
}

core::Result<std::unique_ptr<Server>> Server::create(ServerOptions options,
                                                     const tasks::Registry& registry,
                                                     Pipeline pipeline) {
  auto impl = std::make_unique<Impl>(std::move(options), registry, std::move(pipeline));
  if (auto started = impl->start(); !started) return started.error();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;
const std::string& Server::endpoint() const { return impl_->endpoint(); }
const std::string& Server::inproc_endpoint() const { return impl_->inproc_endpoint(); }
zmq::context_t& Server::context() { return impl_->context(); }
void Server::run() { impl_->run(); }
void Server::stop() { impl_->stop(); }

}  // namespace crucible::env
