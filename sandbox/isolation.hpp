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

// Step 1, while the process is still single-threaded (the kernel refuses CLONE_NEWUSER
// otherwise): when root, drop to `unprivileged_id`; then enter new user, mount, network, IPC
// and UTS namespaces, map the outside uid/gid to root inside, and make every mount private.
// The host file system is still visible afterwards, so libraries can still be loaded (and
// NVRTC warmed up, which may start threads). Works as root and unprivileged (then it needs
// unprivileged user namespaces). Errors: kInternal with the failing step and errno text.
core::Result<JailReport> enter_namespaces(const JailOptions& options);

// Step 2: pivot_root into a read-only tmpfs holding only `readonly_dirs` (read-only binds) and
// a small private writable /tmp; the host tree is detached. Everything the process needs from
// the host must be loaded before this call. Thread-safe with respect to the process's other
// threads (they share its root). On failure the process should exit.
core::Status enter_jail_root(const JailOptions& options, JailReport* report);

// Both steps at once, for processes that need nothing loaded in between.
core::Result<JailReport> enter_jail(const JailOptions& options);

// Installs a seccomp filter that refuses (EPERM) system calls a compiler has no use for:
// sockets, exec, process creation (clone without CLONE_THREAD, fork, vfork), ptrace and
// cross-process memory access, mounts and namespaces, kernel keyring, bpf, perf, io_uring,
// module loading. Sets no_new_privs and applies to every thread. clone3 answers ENOSYS so libc
// falls back to clone, whose flags a filter can inspect. Errors: kInternal.
core::Status install_syscall_filter();

}  // namespace crucible::sandbox
