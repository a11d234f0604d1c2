// Key files and allow-lists (curve_keys.hpp).
#include "core/curve_keys.hpp"

#include <sys/random.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>

namespace crucible::core {
namespace {

constexpr std::string_view kZ85 =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return std::string(text.substr(first, last - first + 1));
}

Error bad_file(const std::filesystem::path& path, const std::string& why) {
  return Error{ErrorCode::kInvalidArgument, "key file " + path.string() + ": " + why};
}

struct KeyLine {
  std::string name;  // "public-key", "secret-key" or "" for a bare key
  std::string key;
};

// The key lines of a key file's text, comments and blank lines skipped.
Result<std::vector<KeyLine>> key_lines(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Error{ErrorCode::kIo, "cannot read key file " + path.string()};
  std::vector<KeyLine> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    // Z85 has '#' in its alphabet: only a line that starts with it is a comment.
    const std::string text = trim(line);
    if (text.empty() || text.front() == '#') continue;
    KeyLine entry;
    if (const auto eq = text.find('='); eq != std::string::npos && !is_z85_key(text)) {
      entry.name = trim(std::string_view(text).substr(0, eq));
      entry.key = trim(std::string_view(text).substr(eq + 1));
      if (entry.key.size() >= 2 && entry.key.front() == '"' && entry.key.back() == '"') {
        entry.key = entry.key.substr(1, entry.key.size() - 2);
      }
    } else {
      entry.key = text;
    }
    if (!is_z85_key(entry.key)) {
      return bad_file(path, "line " + std::to_string(number) +
                                " does not hold a key (40 Z85 characters, as `crucible keys new` "
                                "writes)");
    }
    out.push_back(std::move(entry));
  }
  return out;
}

Status write_private(const std::filesystem::path& path, const std::string& text, mode_t mode) {
  std::error_code error;
  if (std::filesystem::exists(path, error)) {
    return Error{ErrorCode::kInvalidArgument, path.string() + " exists; not overwritten"};
  }
  {
    std::ofstream out(path);
    if (!out) return Error{ErrorCode::kIo, "cannot write " + path.string()};
    out << text;
    if (!out) return Error{ErrorCode::kIo, "cannot write " + path.string()};
  }
  if (::chmod(path.c_str(), mode) != 0) {
    return Error{ErrorCode::kIo, "cannot set the mode of " + path.string()};
  }
  return {};
}

}  // namespace

bool is_z85_key(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return kZ85.find(c) != std::string_view::npos;
         });
}

Status write_key_files(const std::filesystem::path& base, const CurveKeyPair& keys) {
  if (!is_z85_key(keys.public_key) || !is_z85_key(keys.secret_key)) {
    return Error{ErrorCode::kInvalidArgument, "a key pair needs two 40-character Z85 keys"};
  }
  auto secret = base;
  secret += ".key";
  auto shared = base;
  shared += ".pub";
  if (auto written = write_private(secret,
                                   "# crucible CurveZMQ key pair: keep this file secret\n"
                                   "public-key = " +
                                       keys.public_key + "\nsecret-key = " + keys.secret_key + "\n",
                                   0600);
      !written) {
    return written;
  }
  return write_private(shared,
                       "# crucible CurveZMQ public key: give it to the other side\n"
                       "public-key = " +
                           keys.public_key + "\n",
                       0644);
}

Result<CurveKeyPair> read_secret_key_file(const std::filesystem::path& path) {
  auto lines = key_lines(path);
  if (!lines) return lines.error();
  CurveKeyPair keys;
  for (const auto& line : *lines) {
    if (line.name == "public-key") keys.public_key = line.key;
    if (line.name == "secret-key") keys.secret_key = line.key;
  }
  if (keys.secret_key.empty()) {
    return bad_file(path, "no `secret-key = ...` line (a .pub file holds only the public key)");
  }
  if (keys.public_key.empty()) return bad_file(path, "no `public-key = ...` line");
  return keys;
}

Result<std::string> read_public_key(std::string_view key_or_path) {
  if (is_z85_key(key_or_path)) return std::string(key_or_path);
  const std::filesystem::path path{std::string(key_or_path)};
  auto lines = key_lines(path);
  if (!lines) return lines.error();
  for (const auto& line : *lines) {
    if (line.name.empty() || line.name == "public-key") return line.key;
  }
  return bad_file(path, "no public key in it");
}

Result<std::vector<std::string>> read_allowed_keys(const std::filesystem::path& path) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    for (const auto& entry : std::filesystem::directory_iterator(path, error)) {
      if (entry.path().extension() == ".pub") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  std::vector<std::string> keys;
  for (const auto& file : files) {
    auto lines = key_lines(file);
    if (!lines) return lines.error();
    for (const auto& line : *lines) {
      if (line.name == "secret-key") {
        return bad_file(file, "holds a secret key; an allow-list takes public keys only");
      }
      keys.push_back(line.key);
    }
  }
  if (keys.empty()) {
    return Error{ErrorCode::kInvalidArgument,
                 "no client keys in " + path.string() +
                     " (a file of public keys, or a folder of .pub files)"};
  }
  return keys;
}

Result<std::string> new_http_token() {
  unsigned char bytes[32];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Error{ErrorCode::kIo, "the system's random generator failed"};
    }
    got += static_cast<std::size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string token;
  for (const unsigned char byte : bytes) {
    token += kHex[byte >> 4];
    token += kHex[byte & 15];
  }
  return token;
}

namespace {
constexpr std::size_t kMinTokenChars = 32;
constexpr std::size_t kMaxTokenChars = 512;

// Why `token` cannot be a bearer token, or "" when it can.
std::string token_problem(std::string_view token) {
  if (token.size() < kMinTokenChars) {
    return "the token has " + std::to_string(token.size()) + " characters; at least " +
           std::to_string(kMinTokenChars) + " (`crucible keys token` writes 64)";
  }
  if (token.size() > kMaxTokenChars) {
    return "the token is longer than " + std::to_string(kMaxTokenChars) + " characters";
  }
  const bool printable = std::all_of(token.begin(), token.end(), [](char c) {
    return static_cast<unsigned char>(c) > 32 && static_cast<unsigned char>(c) < 127;
  });
  if (!printable) return "the token holds spaces or characters outside printable ASCII";
  return token.front() == '#' ? "the token starts with '#', which marks a comment line" : "";
}
}  // namespace

Status write_token_file(const std::filesystem::path& path, const std::string& token) {
  if (const auto problem = token_problem(token); !problem.empty()) {
    return Error{ErrorCode::kInvalidArgument, problem};
  }
  return write_private(
      path, "# crucible HTTP front bearer token: keep this file secret\n" + token + "\n", 0600);
}

Result<std::string> read_token_file(const std::filesystem::path& path) {
  const auto bad = [&](const std::string& why) {
    return Error{ErrorCode::kInvalidArgument, "token file " + path.string() + ": " + why};
  };
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    return Error{ErrorCode::kIo, "cannot read token file " + path.string()};
  }
  if ((info.st_mode & 077) != 0) {
    return bad("group or others may read it; `chmod 600 " + path.string() + "`");
  }
  std::ifstream in(path);
  if (!in) return Error{ErrorCode::kIo, "cannot read token file " + path.string()};
  std::string token;
  std::string line;
  while (std::getline(in, line)) {
    const std::string text = trim(line);
    if (text.empty() || text.front() == '#') continue;
    if (!token.empty()) return bad("more than one token line");
    token = text;
  }
  if (token.empty()) return bad("no token line");
  if (const auto problem = token_problem(token); !problem.empty()) return bad(problem);
  return token;
}

}  // namespace crucible::core
