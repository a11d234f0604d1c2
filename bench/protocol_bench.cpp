// Protocol benchmark: hello round-trip latency and request throughput over loopback ZeroMQ.
// Starts its own server (same code as `crucible serve`) unless --endpoint names a running one.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "clients/cpp/client.hpp"
#include "core/log.hpp"
#include "core/msgpack_codec.hpp"
#include "core/text_file.hpp"
#include "env/server.hpp"
#include "env/stages.hpp"
#include "runner/gpu_probe.hpp"
#include "tasks/registry.hpp"

namespace {

using namespace crucible;
using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto index = static_cast<std::size_t>(p / 100.0 * static_cast<double>(values.size() - 1));
  return values[index];
}

clients::Client connect_or_die(const std::string& endpoint) {
  clients::ClientOptions options;
  options.endpoint = endpoint;
  options.timeout = std::chrono::milliseconds(30000);
  auto client = clients::Client::connect(options);
  if (!client) {
    std::cerr << client.error().message << "\n";
    std::exit(1);
  }
  return std::move(client).value();
}

struct Throughput {
  double requests_per_s = 0;
  std::uint64_t sent = 0;
  std::uint64_t answered = 0;
  std::uint64_t errors = 0;
};

// `clients` threads, each keeping `window` requests of `op` in flight for `seconds`.
Throughput measure_throughput(const std::string& endpoint, int clients, int window, double seconds,
                              core::Op op, const core::Value& fields) {
  std::atomic<std::uint64_t> sent{0}, answered{0}, errors{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  Clock::time_point start;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto client = connect_or_die(endpoint);
      if (!client.hello()) ++errors;  // connection established before the clock starts
      while (!go.load()) std::this_thread::yield();
      const auto stop_at = Clock::now() + std::chrono::duration<double>(seconds);
      std::vector<clients::Future> inflight;
      for (int i = 0; i < window; ++i) {
        inflight.push_back(client.submit(op, fields));
        ++sent;
      }
      std::size_t head = 0;
      while (head < inflight.size()) {
        auto reply = inflight[head++].get();
        reply ? ++answered : ++errors;
        if (Clock::now() < stop_at) {
          inflight.push_back(client.submit(op, fields));
          ++sent;
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  start = Clock::now();
  go.store(true);
  for (auto& thread : threads) thread.join();
  const std::chrono::duration<double> elapsed = Clock::now() - start;
  Throughput out;
  out.sent = sent.load();
  out.answered = answered.load();
  out.errors = errors.load();
  out.requests_per_s = static_cast<double>(out.answered) / elapsed.count();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"crucible protocol benchmark"};
  std::string endpoint;
  int latency_requests = 20000;
  int clients = 64;
  int window = 16;
  double seconds = 5.0;
  std::string json_path;
  app.add_option("--endpoint", endpoint, "use a running server instead of starting one");
  app.add_option("--requests", latency_requests, "sequential hello round trips")
      ->capture_default_str();
  app.add_option("--clients", clients, "concurrent clients for throughput")->capture_default_str();
  app.add_option("--window", window, "requests each client keeps in flight")->capture_default_str();
  app.add_option("--seconds", seconds, "duration of each throughput run")->capture_default_str();
  app.add_option("--json", json_path, "also write the figures as JSON here");
  CLI11_PARSE(app, argc, argv);
  core::set_log_level(core::LogLevel::kWarn);

  std::unique_ptr<env::Server> server;
  std::thread server_thread;
  std::optional<tasks::Registry> registry;
  if (endpoint.empty()) {
    auto loaded = tasks::Registry::load(CRUCIBLE_SOURCE_DIR);
    if (!loaded) {
      std::cerr << loaded.error().message << "\n";
      return 1;
    }
    registry = std::move(loaded).value();
    env::ServerOptions options;
    options.bind = "tcp://127.0.0.1:*";
    options.log_path = std::filesystem::temp_directory_path() /
                       ("crucible-bench-" + std::to_string(::getpid())) / "trajectories.log";
    options.log_sync = false;
    env::PipelineOptions pipeline_options;
    pipeline_options.home = CRUCIBLE_SOURCE_DIR;
    pipeline_options.gpus.reason = "not needed: this benchmark times the protocol";
    pipeline_options.compile = false;
    auto created = env::Server::create(options, *registry, env::build_pipeline(pipeline_options));
    if (!created) {
      std::cerr << created.error().message << "\n";
      return 1;
    }
    server = std::move(created).value();
    endpoint = server->endpoint();
    server_thread = std::thread([&] { server->run(); });
  }

  // 1. Sequential hello round trips on one connection.
  auto client = connect_or_die(endpoint);
  for (int i = 0; i < 1000; ++i) (void)client.hello();  // warm-up
  std::vector<double> latencies_us;
  latencies_us.reserve(static_cast<std::size_t>(latency_requests));
  int lost = 0;
  for (int i = 0; i < latency_requests; ++i) {
    const auto start = Clock::now();
    const auto reply = client.call(core::Op::kHello);
    const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
    if (!reply) ++lost;
    latencies_us.push_back(elapsed.count());
  }
  const double p50 = percentile(latencies_us, 50);
  const double p99 = percentile(latencies_us, 99);

  // Transport floor, side by side: a bare ROUTER that echoes every frame, same sockets and
  // loopback TCP, no decoding or dispatch. The difference to the hello figure is crucible's own.
  std::vector<double> echo_us;
  {
    zmq::context_t context(1);
    zmq::socket_t router(context, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.bind("tcp://127.0.0.1:*");
    const std::string echo_endpoint = router.get(zmq::sockopt::last_endpoint);
    std::atomic<bool> stop{false};
    std::thread echo([&] {
      while (!stop.load()) {
        zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(50));
        if ((item.revents & ZMQ_POLLIN) == 0) continue;
        zmq::message_t identity, payload;
        (void)router.recv(identity);
        (void)router.recv(payload);
        router.send(identity, zmq::send_flags::sndmore);
        router.send(payload, zmq::send_flags::none);
      }
    });
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(echo_endpoint);
    const std::string frame = core::encode_msgpack(core::make_request(1, core::Op::kHello));
    for (int i = 0; i < 1000 + latency_requests; ++i) {
      const auto start = Clock::now();
      dealer.send(zmq::buffer(frame), zmq::send_flags::none);
      zmq::message_t reply;
      (void)dealer.recv(reply);
      const std::chrono::duration<double, std::micro> elapsed = Clock::now() - start;
      if (i >= 1000) echo_us.push_back(elapsed.count());
    }
    stop.store(true);
    echo.join();
  }
  const double echo_p50 = percentile(echo_us, 50);
  const double echo_p99 = percentile(echo_us, 99);

  // 2. Throughput with many clients pipelining.
  const auto hello_tp = measure_throughput(endpoint, clients, window, seconds, core::Op::kHello,
                                           core::Value::object());
  const auto task_tp = measure_throughput(endpoint, clients, window, seconds, core::Op::kTask,
                                          core::Value{{"task", "llm/rms_norm"}});

  std::printf("hello round trip, 1 client, %d requests: p50 %.1f us, p99 %.1f us, lost %d\n",
              latency_requests, p50, p99, lost);
  std::printf("bare ZeroMQ echo, same transport:          p50 %.1f us, p99 %.1f us\n", echo_p50,
              echo_p99);
  std::printf(
      "hello, %d clients x %d in flight, %.0f s: %.0f req/s, sent %llu, answered %llu, "
      "errors %llu\n",
      clients, window, seconds, hello_tp.requests_per_s,
      static_cast<unsigned long long>(hello_tp.sent),
      static_cast<unsigned long long>(hello_tp.answered),
      static_cast<unsigned long long>(hello_tp.errors));
  std::printf(
      "task (agent view), %d clients x %d in flight: %.0f req/s, sent %llu, answered %llu, "
      "errors %llu\n",
      clients, window, task_tp.requests_per_s, static_cast<unsigned long long>(task_tp.sent),
      static_cast<unsigned long long>(task_tp.answered),
      static_cast<unsigned long long>(task_tp.errors));

  if (!json_path.empty()) {
    const core::Value report{
        {"benchmark", "protocol"},
        {"date", core::utc_time_text()},
        {"machine", {{"cores", std::thread::hardware_concurrency()}}},
        {"command", "build/release/bin/crucible-bench-protocol --json " + json_path},
        {"hello_latency_us",
         {{"requests", latency_requests}, {"p50", p50}, {"p99", p99}, {"lost", lost}}},
        {"bare_zeromq_echo_us", {{"p50", echo_p50}, {"p99", echo_p99}}},
        {"hello_throughput",
         {{"clients", clients},
          {"window", window},
          {"seconds", seconds},
          {"requests_per_s", hello_tp.requests_per_s},
          {"sent", hello_tp.sent},
          {"answered", hello_tp.answered},
          {"errors", hello_tp.errors}}},
        {"task_throughput",
         {{"clients", clients},
          {"window", window},
          {"seconds", seconds},
          {"requests_per_s", task_tp.requests_per_s},
          {"sent", task_tp.sent},
          {"answered", task_tp.answered},
          {"errors", task_tp.errors}}}};
    std::ofstream(json_path) << core::to_json_text(report, 2) << "\n";
  }
  if (server) {
    server->stop();
    server_thread.join();
  }
  return lost == 0 && hello_tp.errors == 0 && task_tp.errors == 0 ? 0 : 1;
}
