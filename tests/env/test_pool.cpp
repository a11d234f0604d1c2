// The C++ client pool against real in-process servers: scores spread, episodes stick to their
// server, a lost server fails its episodes and not the scores, and a server that comes back
// rejoins.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <set>

#include "clients/cpp/pool.hpp"
#include "server_fixture.hpp"

using namespace crucible;
using core::ErrorCode;
using core::Op;
using core::Value;
using testing::RunningServer;

namespace {

clients::PoolOptions quick_options() {
  clients::PoolOptions options;
  options.client.timeout = std::chrono::milliseconds(1500);
  options.refresh = std::chrono::milliseconds(0);  // ask every time: deterministic in a test
  return options;
}

std::uint64_t scores_of(const std::string& endpoint) {
  clients::ClientOptions options;
  options.endpoint = endpoint;
  auto client = clients::Client::connect(options);
  REQUIRE(client.ok());
  const auto stats = client->stats();
  REQUIRE(stats.ok());
  return (*stats)["scores"].get<std::uint64_t>();
}

}  // namespace

TEST_CASE("pool: scores spread over the servers, episodes stay on theirs") {
  RunningServer a;
  RunningServer b;
  auto pool = clients::Pool::connect({a.endpoint(), b.endpoint()}, quick_options());
  REQUIRE(pool.ok());
  for (int i = 0; i < 6; ++i) {
    const auto scored = pool->score("llm/rms_norm", "int main() {}");
    REQUIRE(scored.ok());
    CHECK((*scored)["result"]["status"] == "invalid_action");
  }
  CHECK(scores_of(a.endpoint()) >= 2);
  CHECK(scores_of(b.endpoint()) >= 2);

  std::set<char> owners;
  for (int i = 0; i < 4; ++i) {
    const auto reset = pool->reset("llm/rms_norm");
    REQUIRE(reset.ok());
    const std::string id = (*reset)["episode"];
    REQUIRE(id.rfind("s", 0) == 0);
    owners.insert(id[1]);
    const auto step = pool->step(id, "int main() {}");
    REQUIRE(step.ok());
    CHECK((*step)["episode"] == id);  // the pool's id, prefix and all
    CHECK((*step)["step"] == 1);
    REQUIRE(pool->close(id).ok());
    const auto after = pool->step(id, "int main() {}");
    REQUIRE_FALSE(after.ok());
    CHECK(after.error().code == ErrorCode::kUnknownEpisode);  // the server's own answer
  }
  CHECK(owners.size() == 2);

  for (const std::string bad : {"ep-123", "s9/ep-1", "s/ep-1", "sx/ep", ""}) {
    const auto refused = pool->step(bad, "int main() {}");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().code == ErrorCode::kUnknownEpisode);
    CHECK(refused.error().message.find("s<index>/<id>") != std::string::npos);
  }
}

TEST_CASE("pool: a lost server fails its episodes, scores go on elsewhere, and it rejoins") {
  auto a = std::make_unique<RunningServer>();
  RunningServer b;
  const std::string lost_endpoint = a->endpoint();
  auto pool = clients::Pool::connect({lost_endpoint, b.endpoint()}, quick_options());
  REQUIRE(pool.ok());
  std::string on_a;
  for (int i = 0; i < 4 && on_a.empty(); ++i) {
    const auto reset = pool->reset("llm/rms_norm");
    REQUIRE(reset.ok());
    const std::string id = (*reset)["episode"];
    if (id.rfind("s0/", 0) == 0) on_a = id;
  }
  REQUIRE_FALSE(on_a.empty());

  a.reset();  // the server is gone
  const auto lost = pool->step(on_a, "int main() {}");
  REQUIRE_FALSE(lost.ok());
  CHECK(lost.error().code == ErrorCode::kIo);
  CHECK(lost.error().message.find("server lost: " + lost_endpoint) != std::string::npos);
  for (int i = 0; i < 4; ++i) {
    const auto scored = pool->score("llm/rms_norm", "int main() {}");
    REQUIRE(scored.ok());
  }
  CHECK_FALSE(pool->servers()[0].up);
  CHECK(pool->servers()[1].up);

  // A server on the same address again: the next refresh finds it and it takes work.
  env::ServerOptions same;
  same.bind = lost_endpoint;
  RunningServer back(same);
  const auto before = scores_of(lost_endpoint);
  for (int i = 0; i < 6; ++i) REQUIRE(pool->score("llm/rms_norm", "int main() {}").ok());
  CHECK(pool->servers()[0].up);
  CHECK(scores_of(lost_endpoint) > before);
  // The old episode died with its server: the new one answers it as unknown.
  const auto old = pool->step(on_a, "int main() {}");
  REQUIRE_FALSE(old.ok());
  CHECK(old.error().code == ErrorCode::kUnknownEpisode);
}
