// Confinement for sandbox child processes: user/mount/network namespaces, a tmpfs root that
// holds only read-only bind mounts of chosen directories, and a seccomp deny-list.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/result.hpp"

namespace crucible::sandbox {

struct JailOptions {
  // Directories visible inside the jail, read-only, at their canonical (symlink-free) path.
  // A directory nested in another listed one is covered by its parent's mount.
  std::vector<std::filesystem::path> readonly_dirs;
  // Size cap of the writable /tmp inside the jail (scratch files, precompiled headers).
  std::uint64_t tmp_bytes = 512ull << 20;
  // When running as root, drop to this uid/gid (nobody) before entering the user namespace,
  // so that file accesses the jail would allow are still checked as an unprivileged user.
  std::uint32_t unprivileged_id = 65534;
};

// What enter_jail did, for the worker's hello frame and the pool's stats.
struct JailReport {
  std::uint32_t outside_uid = 0;  // the host uid file accesses are checked against
  std::vector<std::string> mounts;
};

// Moves the calling process (it must be single-threaded) into a new user, mount, network,
// IPC and UTS namespace whose root is a read-only tmpfs holding only `readonly_dirs` and a
// small writable /tmp. Works as root and unprivileged (needs unprivileged user namespaces
// then). Everything the process needs from the host (shared libraries, dlopen'ed plugins)
// must be loaded before this call. On failure the process is in an unspecified state and
// should exit. Errors: kInternal with the failing step and errno text.
core::Result<JailReport> enter_jail(const JailOptions& options);

// Installs a seccomp filter that refuses (EPERM) system calls a compiler has no use for:
// sockets, exec, process creation (clone without CLONE_THREAD, fork, vfork), ptrace and
// cross-process memory access, mounts and namespaces, kernel keyring, bpf, perf, io_uring,
// module loading. Sets no_new_privs. clone3 answers ENOSYS so libc falls back to clone,
// whose flags a filter can inspect. Errors: kInternal.
core::Status install_syscall_filter();

}  // namespace crucible::sandbox
