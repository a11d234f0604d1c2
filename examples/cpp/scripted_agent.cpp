// A scripted agent in C++: reset an episode, submit a solution file, print what came back.
// Usage: scripted_agent [endpoint] [task] [solution.cu]
#include <fstream>
#include <iostream>
#include <sstream>

#include "clients/cpp/client.hpp"
#include "core/msgpack_codec.hpp"

int main(int argc, char** argv) {
  using namespace crucible;
  const std::string endpoint = argc > 1 ? argv[1] : "tcp://127.0.0.1:5555";
  const std::string task = argc > 2 ? argv[2] : "llm/rms_norm";
  const std::string path = argc > 3 ? argv[3] : "tasks/llm/rms_norm/solution.cu";
  std::ifstream file(path);
  if (!file) {
    std::cerr << "cannot read " << path << "\n";
    return 2;
  }
  std::stringstream source;
  source << file.rdbuf();

  clients::ClientOptions options;
  options.endpoint = endpoint;
  auto client = clients::Client::connect(options);
  if (!client) {
    std::cerr << client.error().message << "\n";
    return 1;
  }
  auto episode = client->reset(task, /*seed=*/std::nullopt, /*max_steps=*/4);
  if (!episode) {
    std::cerr << "reset failed: " << episode.error().message << "\n";
    return 1;
  }
  const std::string id = (*episode)["episode"];
  std::cout << "episode " << id << " on " << task << "\n";
  auto step = client->step(id, source.str());
  if (!step) {
    std::cerr << "step failed: " << step.error().message << "\n";
    return 1;
  }
  const auto& result = (*step)["result"];
  std::cout << "status:  " << result["status"].get<std::string>() << "\n"
            << "message: " << result["message"].get<std::string>() << "\n"
            << "reward:  " << (*step)["reward"].get<double>() << "\n"
            << core::to_json_text(result, 2) << "\n";
  (void)client->close(id);
  return 0;
}
