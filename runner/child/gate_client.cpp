#include "runner/child/gate_client.hpp"

#include <cstdlib>
#include <iostream>
#include <string>

#include "core/msgpack_codec.hpp"
#include "sandbox/frame_pipe.hpp"

namespace crucible::runner::child {

double GateClient::request(bool exclusive) {
  if (exclusive == exclusive_) return 0.0;
  exclusive_ = exclusive;
  if (requests_fd_ < 0) return 0.0;
  const core::Value ask{{"gpu", exclusive ? "exclusive" : "shared"}};
  if (!sandbox::write_frame(requests_fd_, ask)) std::_Exit(2);
  auto grant = sandbox::read_frame(grants_fd_, core::trusted_decode_limits(1 << 16));
  if (!grant || !grant->is_object() || grant->value("gpu", std::string()) != "granted") {
    std::cerr << "crucible-gpu-runner: the server did not grant the GPU ("
              << (grant ? core::to_json_text(*grant) : grant.error().message) << ")\n";
    std::_Exit(2);
  }
  return grant->value("waited_ms", 0.0);
}

}  // namespace crucible::runner::child
