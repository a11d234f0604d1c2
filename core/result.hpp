// Result<T>: a value or an {ErrorCode, message} pair; the way every module reports bad input.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace crucible::core {

// Every error the server can put on the wire. One code maps to one wire name (error_code_name)
// and is documented in docs/protocol.md. Add new codes at the end; names are the contract.
enum class ErrorCode : std::uint8_t {
  kBadRequest,          // malformed frame, wrong field type, missing field
  kUnsupportedVersion,  // protocol version the server does not speak
  kUnknownOp,           // op field names no operation
  kUnknownTask,         // task id not in the registry
  kUnknownEpisode,      // episode id never existed, was closed, or expired
  kEpisodeDone,         // step on an episode that reached max_steps
  kTooLarge,            // frame, source or field over a configured limit
  kInvalidArgument,     // well-formed request with a value out of range
  kBusy,                // server queue full; try again later
  kShuttingDown,        // server is stopping and accepts no new work
  kInternal,            // the server's fault; the request may be retried
  kIo,                  // file-system or socket failure (not on the wire for client faults)
  kTimeout,             // a client-side wait expired (clients only)
};

std::string_view error_code_name(ErrorCode code);
std::optional<ErrorCode> error_code_from_name(std::string_view name);

struct Error {
  ErrorCode code;
  std::string message;
};

// Internal invariant broken: a bug in crucible, never a consequence of client data. The request
// loop catches it per request and answers `internal`.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT
  Result(ErrorCode code, std::string message) : state_(Error{code, std::move(message)}) {}

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    if (!ok()) throw InternalError("Result::value() on an error: " + error().message);
    return std::get<0>(state_);
  }
  const T& value() const& {
    if (!ok()) throw InternalError("Result::value() on an error: " + error().message);
    return std::get<0>(state_);
  }
  T&& value() && {
    if (!ok()) throw InternalError("Result::value() on an error: " + error().message);
    return std::get<0>(std::move(state_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  const Error& error() const {
    if (ok()) throw InternalError("Result::error() on a value");
    return std::get<1>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}  // NOLINT
  Result(ErrorCode code, std::string message) : error_(Error{code, std::move(message)}) {}
  bool ok() const { return !error_.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const {
    if (ok()) throw InternalError("Result::error() on a value");
    return *error_;
  }

 private:
  std::optional<Error> error_;
};

using Status = Result<void>;

}  // namespace crucible::core
