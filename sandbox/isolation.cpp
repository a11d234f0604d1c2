// Namespaces + pivot_root jail and a seccomp deny-list for sandbox child processes.
#include "sandbox/isolation.hpp"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace crucible::sandbox {
namespace {

using core::ErrorCode;

core::Error failure(const std::string& step) {
  return core::Error{ErrorCode::kInternal, step + ": " + std::strerror(errno)};
}

bool write_text(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

bool make_dirs(const std::string& path) {
  std::string partial;
  std::size_t start = 1;
  while (start <= path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    partial = path.substr(0, slash);
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return false;
    start = slash + 1;
  }
  return true;
}

// A read-only remount inside a user namespace must keep the flags the kernel locked on the
// original mount (nosuid, nodev, noexec, atime mode), or it fails with EPERM.
unsigned long locked_flags(const std::string& path) {
  struct statvfs info {};
  if (::statvfs(path.c_str(), &info) != 0) return 0;
  unsigned long flags = 0;
  if (info.f_flag & ST_NOSUID) flags |= MS_NOSUID;
  if (info.f_flag & ST_NODEV) flags |= MS_NODEV;
  if (info.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (info.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (info.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (info.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return flags;
}

}  // namespace

core::Result<JailReport> enter_namespaces(const JailOptions& options) {
  JailReport report;
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (uid == 0) {
    const auto id = static_cast<uid_t>(options.unprivileged_id);
    if (::setgroups(0, nullptr) != 0) return failure("setgroups");
    if (::setresgid(id, id, id) != 0) return failure("setresgid");
    if (::setresuid(id, id, id) != 0) return failure("setresuid");
    uid = id;
    gid = id;
  }
  // Changing uid cleared the dumpable flag, which would make /proc/self/*_map root-owned.
  ::prctl(PR_SET_DUMPABLE, 1);
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
    return failure("unshare(user, mount, net, ipc, uts)");
  }
  if (!write_text("/proc/self/setgroups", "deny")) return failure("write setgroups");
  if (!write_text("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n")) {
    return failure("write uid_map");
  }
  if (!write_text("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n")) {
    return failure("write gid_map");
  }
  report.outside_uid = uid;
  // Nothing mounted from here on may propagate back to the host.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return failure("make mounts private");
  }
  return report;
}

core::Status enter_jail_root(const JailOptions& options, JailReport* report) {
  // Canonical paths, parents before children, nested ones dropped.
  std::vector<std::string> dirs;
  for (const auto& dir : options.readonly_dirs) {
    std::error_code error;
    auto canonical = std::filesystem::canonical(dir, error);
    if (error || !std::filesystem::is_directory(canonical)) continue;
    dirs.push_back(canonical.string());
  }
  std::sort(dirs.begin(), dirs.end());
  std::vector<std::string> roots;
  for (const auto& dir : dirs) {
    bool nested = std::any_of(roots.begin(), roots.end(), [&](const std::string& root) {
      return dir == root || dir.rfind(root + "/", 0) == 0;
    });
    if (!nested) roots.push_back(dir);
  }
  // Build the new root on a tmpfs mounted over /tmp (visible only in this namespace).
  const std::string root = "/tmp";
  if (::mount("tmpfs", root.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755") != 0) {
    return failure("mount root tmpfs");
  }
  for (const auto& dir : roots) {
    const std::string target = root + dir;
    if (!make_dirs(target)) return failure("mkdir " + target);
    if (::mount(dir.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
      return failure("bind " + dir);
    }
    const unsigned long flags =
        MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked_flags(dir);
    if (::mount(nullptr, target.c_str(), nullptr, flags, nullptr) != 0) {
      return failure("remount read-only " + dir);
    }
    report->mounts.push_back(dir + " (ro)");
  }
  if (!make_dirs(root + "/tmp") || !make_dirs(root + "/.old_root")) return failure("mkdir");
  if (::syscall(SYS_pivot_root, root.c_str(), (root + "/.old_root").c_str()) != 0) {
    return failure("pivot_root");
  }
  if (::chdir("/") != 0) return failure("chdir /");
  if (::umount2("/.old_root", MNT_DETACH) != 0) return failure("detach old root");
  if (::rmdir("/.old_root") != 0) return failure("rmdir old root");
  const std::string tmp_options = "size=" + std::to_string(options.tmp_bytes) + ",mode=0700";
  if (::mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, tmp_options.c_str()) !=
      0) {
    return failure("mount /tmp");
  }
  report->mounts.push_back("/tmp (tmpfs, " + std::to_string(options.tmp_bytes >> 20) + " MiB)");
  if (::mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
              nullptr) != 0) {
    return failure("remount / read-only");
  }
  // No ptrace attach or /proc access from other processes of the same outside uid.
  ::prctl(PR_SET_DUMPABLE, 0);
  return {};
}

core::Result<JailReport> enter_jail(const JailOptions& options) {
  auto report = enter_namespaces(options);
  if (!report) return report;
  if (auto rooted = enter_jail_root(options, &*report); !rooted) return rooted.error();
  return report;
}

core::Status install_syscall_filter() {
  scmp_filter_ctx filter = ::seccomp_init(SCMP_ACT_ALLOW);
  if (filter == nullptr) return core::Status(ErrorCode::kInternal, "seccomp_init failed");
  auto fail = [&](const std::string& what, int rc) {
    ::seccomp_release(filter);
    return core::Status(ErrorCode::kInternal, what + ": " + std::strerror(-rc));
  };
  static const char* const kDenied[] = {"socket",
                                        "connect",
                                        "bind",
                                        "listen",
                                        "accept",
                                        "accept4",
                                        "execve",
                                        "execveat",
                                        "fork",
                                        "vfork",
                                        "ptrace",
                                        "process_vm_readv",
                                        "process_vm_writev",
                                        "pidfd_getfd",
                                        "kcmp",
                                        "mount",
                                        "umount2",
                                        "pivot_root",
                                        "chroot",
                                        "unshare",
                                        "setns",
                                        "move_mount",
                                        "open_tree",
                                        "fsopen",
                                        "fsmount",
                                        "fsconfig",
                                        "fspick",
                                        "mount_setattr",
                                        "open_by_handle_at",
                                        "name_to_handle_at",
                                        "keyctl",
                                        "add_key",
                                        "request_key",
                                        "bpf",
                                        "perf_event_open",
                                        "userfaultfd",
                                        "io_uring_setup",
                                        "io_uring_enter",
                                        "io_uring_register",
                                        "init_module",
                                        "finit_module",
                                        "delete_module",
                                        "kexec_load",
                                        "kexec_file_load",
                                        "reboot",
                                        "swapon",
                                        "swapoff",
                                        "syslog",
                                        "acct",
                                        "quotactl",
                                        "settimeofday",
                                        "clock_settime",
                                        "adjtimex",
                                        "fanotify_init"};
  for (const char* name : kDenied) {
    int number = ::seccomp_syscall_resolve_name(name);
    if (number == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (int rc = ::seccomp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), number, 0); rc != 0) {
      return fail(std::string("seccomp rule ") + name, rc);
    }
  }
  // Threads yes, processes no.
  if (int rc = ::seccomp_rule_add(filter, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                  SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
      rc != 0) {
    return fail("seccomp rule clone", rc);
  }
  int clone3 = ::seccomp_syscall_resolve_name("clone3");
  if (clone3 != __NR_SCMP_ERROR) {
    if (int rc = ::seccomp_rule_add(filter, SCMP_ACT_ERRNO(ENOSYS), clone3, 0); rc != 0) {
      return fail("seccomp rule clone3", rc);
    }
  }
  // Every thread of the process gets the filter (NVRTC or the libraries it loads may have
  // started threads by now).
  if (int rc = ::seccomp_attr_set(filter, SCMP_FLTATR_CTL_TSYNC, 1); rc != 0) {
    return fail("seccomp thread sync", rc);
  }
  if (int rc = ::seccomp_load(filter); rc != 0) return fail("seccomp_load", rc);
  ::seccomp_release(filter);
  return {};
}

}  // namespace crucible::sandbox
