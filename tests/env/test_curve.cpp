// CurveZMQ: key files, a server that serves only the clients it knows, and the refusal of an
// unauthenticated remote bind.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zmq.h>

#include <filesystem>
#include <fstream>

#include "clients/cpp/client.hpp"
#include "core/curve_keys.hpp"
#include "server_fixture.hpp"

using namespace crucible;
using core::ErrorCode;
using testing::RunningServer;

namespace {

core::CurveKeyPair fresh_keys() {
  char public_key[41] = {};
  char secret_key[41] = {};
  REQUIRE(zmq_curve_keypair(public_key, secret_key) == 0);
  return {public_key, secret_key};
}

std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("crucible-curve-test-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

core::Result<core::Value> hello_as(const RunningServer& server, const std::string& server_key,
                                   std::optional<core::CurveKeyPair> keys, int timeout_ms) {
  clients::ClientOptions options;
  options.endpoint = server.endpoint();
  options.timeout = std::chrono::milliseconds(timeout_ms);
  options.curve_server_key = server_key;
  options.curve_keys = std::move(keys);
  auto client = clients::Client::connect(options);
  if (!client) return client.error();
  return client->hello();
}

}  // namespace

TEST_CASE("curve keys: files round-trip, the secret file is private, bad files are named") {
  const auto dir = scratch("files");
  const auto keys = fresh_keys();
  REQUIRE(core::write_key_files(dir / "server", keys).ok());
  const auto read = core::read_secret_key_file(dir / "server.key");
  REQUIRE(read.ok());
  CHECK(read->public_key == keys.public_key);
  CHECK(read->secret_key == keys.secret_key);
  CHECK((std::filesystem::status(dir / "server.key").permissions() &
         std::filesystem::perms::others_read) == std::filesystem::perms::none);
  CHECK(*core::read_public_key((dir / "server.pub").string()) == keys.public_key);
  CHECK(*core::read_public_key(keys.public_key) == keys.public_key);
  // Never overwritten; a .pub is not a secret key file; an allow-list takes no secrets.
  CHECK_FALSE(core::write_key_files(dir / "server", fresh_keys()).ok());
  const auto no_secret = core::read_secret_key_file(dir / "server.pub");
  REQUIRE_FALSE(no_secret.ok());
  CHECK(no_secret.error().message.find("secret-key") != std::string::npos);
  const auto secret_listed = core::read_allowed_keys(dir / "server.key");
  REQUIRE_FALSE(secret_listed.ok());
  CHECK(secret_listed.error().message.find("secret") != std::string::npos);
  { std::ofstream(dir / "garbage.pub") << "public-key = not-a-key\n"; }
  const auto garbage = core::read_allowed_keys(dir / "garbage.pub");
  REQUIRE_FALSE(garbage.ok());
  CHECK(garbage.error().message.find("line 1") != std::string::npos);
  std::filesystem::remove(dir / "garbage.pub");
  // A folder of .pub files, and a plain list with comments and bare keys.
  const auto other = fresh_keys();
  REQUIRE(core::write_key_files(dir / "client", other).ok());
  const auto folder = core::read_allowed_keys(dir);
  REQUIRE(folder.ok());
  CHECK(folder->size() == 2);
  {
    std::ofstream(dir / "list.txt") << "# trainers\n"
                                    << keys.public_key << "\n\n"
                                    << "public-key = " << other.public_key << "\n";
  }
  const auto list = core::read_allowed_keys(dir / "list.txt");
  REQUIRE(list.ok());
  CHECK(*list == std::vector<std::string>{keys.public_key, other.public_key});
}

TEST_CASE("curve server: a known client is served; no key or an unknown key gets nothing") {
  const auto server_keys = fresh_keys();
  const auto known = fresh_keys();
  env::ServerOptions options;
  options.curve_keys = server_keys;
  options.allowed_client_keys = {known.public_key};
  RunningServer server(options);

  const auto hello = hello_as(server, server_keys.public_key, known, 20000);
  REQUIRE(hello.ok());
  CHECK((*hello)["auth"] == "curve");

  const auto plain = hello_as(server, "", std::nullopt, 1500);
  REQUIRE_FALSE(plain.ok());
  CHECK(plain.error().code == ErrorCode::kTimeout);
  const auto stranger = hello_as(server, server_keys.public_key, fresh_keys(), 1500);
  REQUIRE_FALSE(stranger.ok());
  CHECK(stranger.error().code == ErrorCode::kTimeout);
  // The right client keys against a wrong server key: the handshake fails, nothing is served.
  const auto impostor = hello_as(server, fresh_keys().public_key, known, 1500);
  REQUIRE_FALSE(impostor.ok());

  // The refusals were counted, and the known client is still served.
  clients::ClientOptions client_options;
  client_options.endpoint = server.endpoint();
  client_options.curve_server_key = server_keys.public_key;
  client_options.curve_keys = known;
  auto client = clients::Client::connect(client_options);
  REQUIRE(client.ok());
  const auto stats = client->stats();
  REQUIRE(stats.ok());
  CHECK((*stats)["auth_denied"].get<std::uint64_t>() >= 1);
  const auto scored = client->score("llm/rms_norm", "int main() {}");
  REQUIRE(scored.ok());
  CHECK((*scored)["result"]["status"] == "invalid_action");
}

TEST_CASE("curve server: a remote bind needs keys or an explicit insecure flag") {
  env::ServerOptions remote;
  remote.bind = "tcp://0.0.0.0:*";
  CHECK_THROWS_WITH_AS(RunningServer{remote}, doctest::Contains("--insecure"), std::runtime_error);
  remote.curve_keys = fresh_keys();
  remote.allowed_client_keys = {fresh_keys().public_key};
  CHECK_NOTHROW(RunningServer{remote});
  env::ServerOptions no_clients;
  no_clients.curve_keys = fresh_keys();
  CHECK_THROWS_WITH_AS(RunningServer{no_clients}, doctest::Contains("--client-keys"),
                       std::runtime_error);
  env::ServerOptions insecure;
  insecure.bind = "tcp://0.0.0.0:*";
  insecure.allow_remote = true;
  CHECK_NOTHROW(RunningServer{insecure});
}

TEST_CASE("http tokens: new ones are 64 hex digits, files are private and checked when read") {
  const auto dir = scratch("tokens");
  const auto first = core::new_http_token();
  const auto second = core::new_http_token();
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  CHECK(first->size() == 64);
  CHECK(first->find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(*first != *second);
  REQUIRE(core::write_token_file(dir / "token", *first).ok());
  CHECK((std::filesystem::status(dir / "token").permissions() &
         (std::filesystem::perms::group_all | std::filesystem::perms::others_all)) ==
        std::filesystem::perms::none);
  CHECK(*core::read_token_file(dir / "token") == *first);
  CHECK_FALSE(core::write_token_file(dir / "token", *second).ok());  // never overwritten
  CHECK_FALSE(core::write_token_file(dir / "short", "abc").ok());

  const auto refused = [&](const std::string& name, const std::string& text,
                           std::filesystem::perms mode, const std::string& needle) {
    INFO(name);
    { std::ofstream(dir / name) << text; }
    std::filesystem::permissions(dir / name, mode);
    const auto read = core::read_token_file(dir / name);
    REQUIRE_FALSE(read.ok());
    CHECK(read.error().code == ErrorCode::kInvalidArgument);
    CHECK_MESSAGE(read.error().message.find(needle) != std::string::npos, read.error().message);
  };
  const auto owner = std::filesystem::perms::owner_read | std::filesystem::perms::owner_write;
  refused("readable", *first + "\n", owner | std::filesystem::perms::others_read, "chmod 600");
  refused("group", *first + "\n", owner | std::filesystem::perms::group_read, "chmod 600");
  refused("empty", "# nothing here\n\n", owner, "no token line");
  refused("two", *first + "\n" + *second + "\n", owner, "more than one");
  refused("short", "0123456789abcdef\n", owner, "at least 32");
  refused("spaced", std::string(20, 'a') + " " + std::string(20, 'b') + "\n", owner,
          "holds spaces");
  { std::ofstream(dir / "commented") << "# a comment\n\n  " << *second << "  \n"; }
  std::filesystem::permissions(dir / "commented", owner);
  CHECK(*core::read_token_file(dir / "commented") == *second);
  CHECK(core::read_token_file(dir / "missing").error().code == ErrorCode::kIo);
}
