// Version of the sandbox protocol between the server and its child processes.
namespace crucible::sandbox {
extern const int kSandboxProtocolVersion = 1;
}  // namespace crucible::sandbox
