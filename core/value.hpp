// Value: the dynamic document type used for wire messages, manifests views, logs and reports.
#pragma once

#include <nlohmann/json.hpp>

namespace crucible::core {

// A msgpack map on the wire, a JSON object in reports: one type for both. Binary payloads
// (cubins, tensors) are Value::binary_t.
using Value = nlohmann::json;

}  // namespace crucible::core
