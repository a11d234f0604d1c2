// CurveZMQ keys as text: Z85 (40 characters for 32 bytes), the key files `crucible keys new`
// writes and the allow-list a server reads; and the HTTP front's bearer-token file. No ZeroMQ here:
// generating keys and using them on a socket is the caller's (env/ for the server, clients/ for the
// client).
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.hpp"

namespace crucible::core {

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

// 40 characters of the Z85 alphabet.
bool is_z85_key(std::string_view text);

// A key pair's two files: `<base>.key` (both keys; mode 0600: the secret) and `<base>.pub` (the
// public key, to hand to the other side). Lines `public-key = <z85>` / `secret-key = <z85>`,
// comment lines start with `#`. Refuses to overwrite an existing file.
Status write_key_files(const std::filesystem::path& base, const CurveKeyPair& keys);

// The pair in a `.key` file. Errors name the file and what is wrong (kInvalidArgument), or kIo.
Result<CurveKeyPair> read_secret_key_file(const std::filesystem::path& path);

// A public key given as its 40 Z85 characters, or as a file holding one (a `.pub`, a `.key`, or
// the bare key on a line).
Result<std::string> read_public_key(std::string_view key_or_path);

// The client keys a server lets in: a file of keys (one per line as in a `.pub`, or bare; lines
// starting with `#` are comments) or a folder whose `*.pub` files each hold one. At least one key.
Result<std::vector<std::string>> read_allowed_keys(const std::filesystem::path& path);

// A new bearer token for the HTTP front: 64 hex digits of 32 bytes from the system's
// cryptographic generator (getrandom). Errors: kIo when the generator fails.
Result<std::string> new_http_token();

// The HTTP front's token file: one line (comment lines start with `#`), the token of 32 to 512
// printable characters without spaces; written with mode 0600 and never overwritten.
Status write_token_file(const std::filesystem::path& path, const std::string& token);

// The token in `path`. Refused (kInvalidArgument, naming the file and what is wrong): a file that
// group or others may read (mode must be 0600 or 0400, as for ssh keys), no token line, more
// than one, or a token that is too short or holds spaces. kIo when it cannot be read.
Result<std::string> read_token_file(const std::filesystem::path& path);

}  // namespace crucible::core
