// Client implementation: synchronous sends, replies filed by id as they arrive.
#include "clients/cpp/client.hpp"

#include <zmq.hpp>

#include "core/msgpack_codec.hpp"

namespace crucible::clients {

using core::ErrorCode;
using core::Value;
using Clock = std::chrono::steady_clock;

core::Result<Value> Future::get() {
  if (client_ == nullptr) return core::Error{ErrorCode::kInternal, "empty future"};
  return client_->wait_for(id_);
}

Client::Client(ClientOptions options)
    : options_(std::move(options)), context_(std::make_unique<zmq::context_t>(1)) {}

Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;
Client::~Client() {
  socket_.reset();
  context_.reset();
}

core::Result<Client> Client::connect(ClientOptions options) {
  Client client(std::move(options));
  try {
    client.socket_ = std::make_unique<zmq::socket_t>(*client.context_, zmq::socket_type::dealer);
    client.socket_->set(zmq::sockopt::linger, 0);
    client.socket_->set(zmq::sockopt::sndhwm, 0);
    client.socket_->set(zmq::sockopt::rcvhwm, 0);
    client.socket_->set(zmq::sockopt::maxmsgsize,
                        static_cast<std::int64_t>(client.options_.max_reply_bytes));
    // ZeroMQ sockets speak IPv4 only unless told otherwise: tcp://[::1]:5555 needs it.
    if (client.options_.endpoint.find('[') != std::string::npos) {
      client.socket_->set(zmq::sockopt::ipv6, 1);
    }
    if (!client.options_.curve_server_key.empty()) {
      if (!client.options_.curve_keys) {
        return core::Error{core::ErrorCode::kInvalidArgument,
                           "a Curve server key needs this client's key pair too"};
      }
      client.socket_->set(zmq::sockopt::curve_serverkey, client.options_.curve_server_key);
      client.socket_->set(zmq::sockopt::curve_publickey, client.options_.curve_keys->public_key);
      client.socket_->set(zmq::sockopt::curve_secretkey, client.options_.curve_keys->secret_key);
    }
    client.socket_->connect(client.options_.endpoint);
  } catch (const zmq::error_t& e) {
    return core::Error{ErrorCode::kIo,
                       "cannot connect to " + client.options_.endpoint + ": " + e.what()};
  }
  return client;
}

Future Client::submit(core::Op op, Value fields) {
  const std::uint64_t id = next_id_++;
  Value request = fields.is_object() ? std::move(fields) : Value::object();
  request["v"] = core::kProtocolVersion;
  request["id"] = id;
  request["op"] = core::op_name(op);
  Pending& pending = pending_[id];
  pending.deadline = Clock::now() + options_.timeout;
  try {
    const std::string payload = core::encode_msgpack(request);
    socket_->send(zmq::buffer(payload), zmq::send_flags::none);
  } catch (const zmq::error_t& e) {
    pending.reply = core::Result<Value>(ErrorCode::kIo, std::string("send failed: ") + e.what());
  }
  return Future(this, id);
}

core::Result<Value> Client::call(core::Op op, Value fields) {
  return submit(op, std::move(fields)).get();
}

core::Status Client::receive_one(std::chrono::milliseconds budget, bool* got) {
  *got = false;
  zmq::pollitem_t item{socket_->handle(), 0, ZMQ_POLLIN, 0};
  try {
    zmq::poll(&item, 1, budget);
    if ((item.revents & ZMQ_POLLIN) == 0) return {};
    zmq::message_t message;
    if (!socket_->recv(message, zmq::recv_flags::dontwait)) return {};
    *got = true;
    // A DEALER receives exactly what the server sent: one frame per reply.
    while (message.more()) {
      zmq::message_t extra;
      (void)socket_->recv(extra, zmq::recv_flags::dontwait);
      if (!extra.more()) break;
    }
    auto reply = core::decode_msgpack(message.to_string_view(),
                                      core::trusted_decode_limits(options_.max_reply_bytes));
    if (!reply || !reply->is_object()) return {};  // not a reply to anything we sent
    const auto id_it = reply->find("id");
    if (id_it == reply->end() || !id_it->is_number_unsigned()) return {};
    const auto pending = pending_.find(id_it->get<std::uint64_t>());
    if (pending == pending_.end() || pending->second.reply) return {};
    const auto ok = reply->find("ok");
    if (ok != reply->end() && ok->is_boolean() && ok->get<bool>()) {
      pending->second.reply = core::Result<Value>(std::move(reply).value());
      return {};
    }
    ErrorCode code = ErrorCode::kInternal;
    std::string text = "malformed error reply";
    if (const auto error = reply->find("error"); error != reply->end() && error->is_object()) {
      if (const auto c = error->find("code"); c != error->end() && c->is_string()) {
        code = core::error_code_from_name(c->get<std::string>()).value_or(ErrorCode::kInternal);
      }
      if (const auto m = error->find("message"); m != error->end() && m->is_string()) {
        text = m->get<std::string>();
      }
    }
    pending->second.reply = core::Result<Value>(code, std::move(text));
    return {};
  } catch (const zmq::error_t& e) {
    return core::Error{ErrorCode::kIo, std::string("receive failed: ") + e.what()};
  }
}

core::Result<Value> Client::wait_for(std::uint64_t id) {
  auto it = pending_.find(id);
  if (it == pending_.end()) {
    return core::Error{ErrorCode::kInternal, "no request " + std::to_string(id) + " is pending"};
  }
  while (!it->second.reply) {
    const auto now = Clock::now();
    if (now >= it->second.deadline) {
      pending_.erase(it);
      return core::Error{ErrorCode::kTimeout, "no reply from " + options_.endpoint + " within " +
                                                  std::to_string(options_.timeout.count()) + " ms"};
    }
    const auto budget =
        std::chrono::duration_cast<std::chrono::milliseconds>(it->second.deadline - now) +
        std::chrono::milliseconds(1);
    bool got = false;
    if (auto status = receive_one(budget, &got); !status) {
      pending_.erase(it);
      return status.error();
    }
    it = pending_.find(id);  // receive_one may rehash the map
  }
  auto reply = std::move(*it->second.reply);
  pending_.erase(it);
  return reply;
}

core::Result<Value> Client::hello() {
  return call(core::Op::kHello, Value{{"client", "crucible-cpp"}});
}

core::Result<Value> Client::tasks(std::optional<std::string> category) {
  Value fields = Value::object();
  if (category) fields["category"] = *category;
  return call(core::Op::kTasks, std::move(fields));
}

core::Result<Value> Client::task(const std::string& id) {
  return call(core::Op::kTask, Value{{"task", id}});
}

core::Result<Value> Client::reset(const std::string& task, std::optional<std::uint64_t> seed,
                                  std::optional<std::uint32_t> max_steps, Value reward,
                                  Value options) {
  Value fields{{"task", task}};
  if (seed) fields["seed"] = *seed;
  if (max_steps) fields["max_steps"] = *max_steps;
  if (!reward.is_null()) fields["reward"] = std::move(reward);
  if (!options.is_null()) fields["options"] = std::move(options);
  if (!options_.tag.is_null()) fields["tag"] = options_.tag;
  return call(core::Op::kReset, std::move(fields));
}

core::Result<Value> Client::step(const std::string& episode, const std::string& source,
                                 Value plan) {
  Value fields{{"episode", episode}, {"source", source}};
  if (!plan.is_null()) fields["plan"] = std::move(plan);
  return call(core::Op::kStep, std::move(fields));
}

core::Result<Value> Client::score(const std::string& task, const std::string& source, Value plan,
                                  std::optional<std::uint64_t> seed) {
  Value fields{{"task", task}, {"source", source}};
  if (!plan.is_null()) fields["plan"] = std::move(plan);
  if (seed) fields["seed"] = *seed;
  if (!options_.tag.is_null()) fields["tag"] = options_.tag;
  return call(core::Op::kScore, std::move(fields));
}

core::Result<Value> Client::close(const std::string& episode) {
  return call(core::Op::kClose, Value{{"episode", episode}});
}

core::Result<Value> Client::stats() { return call(core::Op::kStats); }

}  // namespace crucible::clients
