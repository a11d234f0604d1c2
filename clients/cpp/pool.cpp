// Pool over several servers (pool.hpp).
#include "clients/cpp/pool.hpp"

#include <limits>

namespace crucible::clients {

using core::ErrorCode;
using core::Op;
using core::Value;
using Clock = std::chrono::steady_clock;

namespace {

// The server was not reached or did not answer: a reason to try another, unlike an error reply.
bool transport_failure(const core::Error& error) {
  return error.code == ErrorCode::kTimeout || error.code == ErrorCode::kIo;
}

// inflight plus every pool's queue_depth from a stats reply.
double load_of(const Value& stats) {
  double load = stats.value("inflight", 0.0);
  const auto pools = stats.find("pools");
  if (pools != stats.end() && pools->is_object()) {
    for (const auto& [name, pool] : pools->items()) {
      if (pool.is_object() && pool.contains("queue_depth") && pool["queue_depth"].is_number()) {
        load += pool["queue_depth"].get<double>();
      }
    }
  }
  return load;
}

}  // namespace

core::Result<Pool> Pool::connect(const std::vector<std::string>& endpoints, PoolOptions options) {
  if (endpoints.empty()) {
    return core::Error{ErrorCode::kInvalidArgument, "a pool needs at least one endpoint"};
  }
  Pool pool(std::move(options));
  for (const auto& endpoint : endpoints) {
    ClientOptions client_options = pool.options_.client;
    client_options.endpoint = endpoint;
    auto client = Client::connect(client_options);
    if (!client) return client.error();
    pool.clients_.push_back(std::move(client).value());
    pool.servers_.push_back(PoolServer{endpoint, true, 0, {}});
    pool.checked_.push_back(Clock::time_point{});
  }
  return pool;
}

void Pool::mark_down(std::size_t index, const core::Error& error) {
  servers_[index].up = false;
  servers_[index].last_error = error.message;
  checked_[index] = Clock::now();
}

// A server's load is asked again once stale; a lost one is asked whether it is back.
void Pool::refresh(std::size_t index) {
  if (Clock::now() - checked_[index] < options_.refresh) return;
  checked_[index] = Clock::now();
  auto stats = clients_[index].call(Op::kStats);
  if (!stats) {
    if (transport_failure(stats.error())) mark_down(index, stats.error());
    return;
  }
  servers_[index].up = true;
  servers_[index].last_error.clear();
  servers_[index].load = load_of(*stats);
}

core::Result<Value> Pool::call_any(Op op, const Value& fields) {
  for (std::size_t i = 0; i < servers_.size(); ++i) refresh(i);
  std::vector<bool> tried(servers_.size(), false);
  core::Error last{ErrorCode::kIo, "no server of the pool is up"};
  for (std::size_t attempt = 0; attempt < servers_.size(); ++attempt) {
    // The least-loaded server that is up and untried; ties taken in turn.
    std::size_t best = servers_.size();
    double best_load = std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < servers_.size(); ++k) {
      const std::size_t i = (next_ + k) % servers_.size();
      if (tried[i] || !servers_[i].up) continue;
      if (servers_[i].load < best_load) {
        best = i;
        best_load = servers_[i].load;
      }
    }
    if (best == servers_.size()) break;
    next_ = (best + 1) % servers_.size();
    tried[best] = true;
    auto reply = clients_[best].call(op, fields);
    if (reply || !transport_failure(reply.error())) {
      if (reply && op == Op::kReset) {
        (*reply)["episode"] =
            "s" + std::to_string(best) + "/" + (*reply)["episode"].get<std::string>();
      }
      return reply;
    }
    mark_down(best, reply.error());
    last = core::Error{ErrorCode::kIo, "server lost: " + servers_[best].endpoint + " (" +
                                           reply.error().message + ")"};
  }
  return last;
}

core::Result<Value> Pool::call_episode(Op op, Value fields) {
  const auto id = fields.find("episode");
  const std::string text = id != fields.end() && id->is_string() ? id->get<std::string>() : "";
  const auto slash = text.find('/');
  std::size_t index = servers_.size();
  if (text.size() > 1 && text[0] == 's' && slash != std::string::npos && slash > 1 &&
      text.find_first_not_of("0123456789", 1) == slash) {
    index = std::stoul(text.substr(1, slash - 1));
  }
  if (index >= servers_.size()) {
    return core::Error{ErrorCode::kUnknownEpisode,
                       "episode '" + text.substr(0, 80) +
                           "' was not opened through this pool (its ids read s<index>/<id>)"};
  }
  if (!servers_[index].up) refresh(index);
  if (!servers_[index].up) {
    return core::Error{ErrorCode::kIo, "server lost: " + servers_[index].endpoint +
                                           " holds episode " + text + " (" +
                                           servers_[index].last_error + ")"};
  }
  fields["episode"] = text.substr(slash + 1);
  auto reply = clients_[index].call(op, std::move(fields));
  if (!reply) {
    if (!transport_failure(reply.error())) return reply;
    mark_down(index, reply.error());
    return core::Error{ErrorCode::kIo, "server lost: " + servers_[index].endpoint +
                                           " did not answer for episode " + text + " (" +
                                           reply.error().message + "); not retried"};
  }
  if (reply->contains("episode")) (*reply)["episode"] = text;
  return reply;
}

core::Result<Value> Pool::call(Op op, Value fields) {
  if (op == Op::kStep || op == Op::kClose) return call_episode(op, std::move(fields));
  return call_any(op, fields);
}

core::Result<Value> Pool::score(const std::string& task, const std::string& source) {
  return call(Op::kScore, Value{{"task", task}, {"source", source}});
}
core::Result<Value> Pool::reset(const std::string& task) {
  return call(Op::kReset, Value{{"task", task}});
}
core::Result<Value> Pool::step(const std::string& episode, const std::string& source) {
  return call(Op::kStep, Value{{"episode", episode}, {"source", source}});
}
core::Result<Value> Pool::close(const std::string& episode) {
  return call(Op::kClose, Value{{"episode", episode}});
}

}  // namespace crucible::clients
