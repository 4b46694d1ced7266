// SPDX-License-Identifier: Apache-2.0
//
// IPC memory of the emulated device, with CUDA's rules: an allocation of
// kShareableBytes and more is exported by handle (pid, fd, identity); another
// process maps it once per allocation however often a handle is opened, one
// close unmaps it for every user, and a later use fails naming why.
//
// Why it exists: LMCache-driven transfer maps a worker's KV caches into the
// server; a plugin that opens a handle twice, closes it early, exports memory a
// runtime cannot export or opens memory its exporter did not allow it (the
// importer allowlist, as Ascend's: g_ipc_allowlist) must fail here as it would
// on a device.

#include "emulator.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace emulator {

std::atomic<bool> g_ipc_allowlist{true};

namespace {

// The importers this process allowed, per exported allocation (Ascend's
// aclrtIpcMemSetImportPid): a table in shared memory whose fd rides in every
// handle, which an importer reads before it maps (when the rule is on).
struct Allowed {
  int64_t inode, pid;
};
constexpr int64_t kAllowSlots = 4096;
int g_allow_fd = -1;
Allowed* g_allowed = nullptr;  // kAllowSlots, the first (0, 0) unused

int allow_table() {  // caller holds g_mutex
  if (g_allow_fd >= 0) return g_allow_fd;
  const int fd = memfd_create("lmcache-emulated-ipc-allowlist", MFD_CLOEXEC);
  TORCH_CHECK(fd >= 0 && ftruncate(fd, kAllowSlots * sizeof(Allowed)) == 0,
              "creating the IPC allowlist failed: ", std::strerror(errno));
  g_allowed =
      reinterpret_cast<Allowed*>(map_shared(fd, kAllowSlots * sizeof(Allowed)));
  return g_allow_fd = fd;
}

// Whether the exporter `pid` allowed this process to import `inode`.
bool allowed_here(int64_t pid, int64_t allow_fd, int64_t inode) {
  if (pid == getpid()) return true;  // a process maps its own memory
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(allow_fd);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t bytes = kAllowSlots * sizeof(Allowed);
  void* table = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (table == MAP_FAILED) return false;
  bool found = false;
  const auto* slots = static_cast<const Allowed*>(table);
  for (int64_t i = 0; i < kAllowSlots && slots[i].inode != 0 && !found; ++i)
    found = slots[i].inode == inode && slots[i].pid == getpid();
  munmap(table, bytes);
  return found;
}

}  // namespace

// Allow process `importer` to open the handle (exporter pid, memfd, inode) of
// this process's allocation.
void ipc_allow(int64_t pid, int64_t fd, int64_t inode, int64_t importer) {
  check_context("ipc_allow");
  TORCH_CHECK(pid == getpid(), "only the exporting process (", pid,
              ") allows importers of its memory, not ", getpid());
  std::lock_guard<std::mutex> lock(g_mutex);
  struct stat identity{};
  TORCH_CHECK(fstat(static_cast<int>(fd), &identity) == 0 &&
                  static_cast<int64_t>(identity.st_ino) == inode,
              "not a handle of memory this process exports (freed?)");
  allow_table();
  int64_t i = 0;
  while (i < kAllowSlots && g_allowed[i].inode != 0 &&
         !(g_allowed[i].inode == inode && g_allowed[i].pid == importer))
    ++i;
  TORCH_CHECK(i < kAllowSlots, "the IPC allowlist is full (", kAllowSlots,
              " importers)");
  g_allowed[i] = Allowed{inode, importer};
}

std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t> ipc_export(
    int64_t ptr) {
  check_context("ipc_export");
  const auto address = static_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_mutex);
  uintptr_t base = 0;
  const Mapping* mapping = find_holding(address, &base);
  TORCH_CHECK(mapping && mapping->fd >= 0, "address ", ptr,
              " is not in exportable emulated device memory: only ",
              "allocations of at least ", kShareableBytes,
              " bytes made by this process can be exported (allocate ",
              "KV caches as whole tensors of at least that size)");
  TORCH_CHECK(!mapping->vmm, "address ", ptr,
              " was allocated through the VMM API (expandable segments): "
              "legacy IPC cannot export it. Export it as a shareable handle "
              "instead, a file descriptor the importer receives over a Unix "
              "socket (SCM_RIGHTS), as LMCache's VmmCudaIPCWrapper does "
              "(cuMemExportToShareableHandle: ipc_export_fd)");
  struct stat identity{};
  TORCH_CHECK(
      fstat(mapping->fd, &identity) == 0,
      "fstat of an exportable allocation failed: ", std::strerror(errno));
  return {static_cast<int64_t>(getpid()),
          mapping->fd,
          static_cast<int64_t>(identity.st_ino),
          static_cast<int64_t>(address - base),
          static_cast<int64_t>(mapping->size),
          allow_table()};
}

int64_t map_import(int local_fd, int64_t size, int64_t index, int64_t pid);

int64_t ipc_open(int64_t pid, int64_t fd, int64_t inode, int64_t size,
                 int64_t index, int64_t allow_fd) {
  check_context("ipc_open");
  check_index(static_cast<c10::DeviceIndex>(index));
  check_device(static_cast<c10::DeviceIndex>(index));
  TORCH_CHECK(!g_fault_ipc_open, "opening an IPC memory handle of process ",
              pid, " failed: the device refused ",
              "the mapping (fault injected: ipc_open)");
  TORCH_CHECK(!g_ipc_allowlist || allowed_here(pid, allow_fd, inode),
              "opening an IPC memory handle of process ", pid,
              " failed: this process (", getpid(),
              ") is not on the allocation's importer allowlist. The exporter "
              "allows each importer before it opens the handle (Ascend: "
              "aclrtIpcMemSetImportPid)");
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int local_fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  TORCH_CHECK(
      local_fd >= 0, "cannot open emulated IPC handle ", path, ": ",
      std::strerror(errno),
      " (the exporting process must be alive and the memory still allocated)");
  struct stat identity{};
  if (fstat(local_fd, &identity) != 0 ||
      static_cast<int64_t>(identity.st_ino) != inode) {
    close(local_fd);
    TORCH_CHECK(false, "emulated IPC handle ", path,
                " is stale: the exporting process freed that allocation");
  }
  return map_import(local_fd, size, index, pid);
}

// Map the shared memory behind `local_fd` (closed here), once per allocation.
int64_t map_import(int local_fd, int64_t size, int64_t index, int64_t pid) {
  struct stat identity{};
  if (fstat(local_fd, &identity) != 0) {
    close(local_fd);
    TORCH_CHECK(false, "not an exported allocation: ", std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  for (const auto& [base, mapping] : g_mappings) {
    if (mapping.fd != kImported || mapping.inode != identity.st_ino) continue;
    close(local_fd);
    TORCH_CHECK(mapping.device == index, "this allocation is already open on ",
                c10::Device(kDevice, mapping.device),
                "; open it on one device per process");
    count(kIpcOpens);  // the mapping it has: still an open call
    return static_cast<int64_t>(base);
  }
  Mapping mapping{kImported, static_cast<size_t>(size),
                  static_cast<c10::DeviceIndex>(index), identity.st_ino, pid};
  try {
    mapping.shadow = map_shared(local_fd, mapping.size);
  } catch (...) {
    close(local_fd);
    throw;
  }
  close(local_fd);  // the mapping keeps the memory alive
  void* address = reserve_addresses(mapping.size);
  g_mappings[reinterpret_cast<uintptr_t>(address)] = mapping;
  count(kIpcOpens);
  return reinterpret_cast<int64_t>(address);
}

void ipc_close(int64_t address) {
  check_context("ipc_close");
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_mappings.find(static_cast<uintptr_t>(address));
  TORCH_CHECK(it != g_mappings.end() && it->second.fd == kImported, "0x",
              std::hex, address, std::dec,
              " is not an open IPC mapping of this process: it was closed "
              "already (close each opened "
              "allocation once, when its last user is done) or never opened");
  munmap(it->second.shadow, it->second.size);
  it->second.shadow = nullptr;
  it->second.fd = kClosed;  // its addresses stay reserved: a later use is an
                            // error, not another allocation's bytes
  count(kIpcCloses);
}

std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> ipc_imports() {
  std::lock_guard<std::mutex> lock(g_mutex);
  std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> out;
  for (const auto& [base, mapping] : g_mappings) {
    if (mapping.fd == kImported) {
      out.emplace_back(static_cast<int64_t>(base),
                       static_cast<int64_t>(mapping.size), mapping.device,
                       mapping.pid);
    }
  }
  return out;
}

// The VMM route (cuMemExportToShareableHandle, cuMemImportFromShareableHandle):
// a descriptor of its own for the allocation at `ptr` (the caller sends, then
// closes it), its offset there and size; and the importer's mapping of one.
std::tuple<int64_t, int64_t, int64_t> ipc_export_fd(int64_t ptr) {
  check_context("ipc_export_fd");
  std::lock_guard<std::mutex> lock(g_mutex);
  uintptr_t base = 0;
  const Mapping* mapping = find_holding(static_cast<uintptr_t>(ptr), &base);
  TORCH_CHECK(mapping && mapping->fd >= 0, "address ", ptr,
              " is not in exportable emulated device memory");
  const int fd = fcntl(mapping->fd, F_DUPFD_CLOEXEC, 0);
  TORCH_CHECK(fd >= 0, "dup failed: ", std::strerror(errno));
  return {fd, static_cast<int64_t>(static_cast<uintptr_t>(ptr) - base),
          static_cast<int64_t>(mapping->size)};
}

int64_t ipc_open_fd(int64_t fd, int64_t size, int64_t index) {
  check_context("ipc_open_fd");
  check_index(static_cast<c10::DeviceIndex>(index));
  check_device(static_cast<c10::DeviceIndex>(index));
  TORCH_CHECK(!g_fault_ipc_open,
              "opening an IPC memory descriptor failed: the device refused "
              "the mapping (fault injected: ipc_open)");
  const int local_fd = fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0);
  TORCH_CHECK(local_fd >= 0, "not a descriptor: ", std::strerror(errno));
  return map_import(local_fd, size, index, 0);
}

}  // namespace emulator
