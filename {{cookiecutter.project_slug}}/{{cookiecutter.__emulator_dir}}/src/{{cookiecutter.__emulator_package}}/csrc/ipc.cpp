// SPDX-License-Identifier: Apache-2.0
//
// IPC memory of the emulated device, with CUDA's rules: an allocation of
// kShareableBytes and more is exported by handle (pid, fd, identity); another
// process maps it once per allocation however often a handle is opened, one
// close unmaps it for every user, and a later use fails naming why.
//
// Why it exists: LMCache-driven transfer maps a worker's KV caches into the
// server; a plugin that opens a handle twice, closes it early or exports
// memory a runtime cannot export must fail here as it would on a device.

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

std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> ipc_export(
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
  struct stat identity{};
  TORCH_CHECK(
      fstat(mapping->fd, &identity) == 0,
      "fstat of an exportable allocation failed: ", std::strerror(errno));
  return {static_cast<int64_t>(getpid()), mapping->fd,
          static_cast<int64_t>(identity.st_ino),
          static_cast<int64_t>(address - base),
          static_cast<int64_t>(mapping->size)};
}

int64_t ipc_open(int64_t pid, int64_t fd, int64_t inode, int64_t size,
                 int64_t index) {
  check_context("ipc_open");
  check_index(static_cast<c10::DeviceIndex>(index));
  check_device(static_cast<c10::DeviceIndex>(index));
  TORCH_CHECK(!g_fault_ipc_open, "opening an IPC memory handle of process ",
              pid, " failed: the device refused ",
              "the mapping (fault injected: ipc_open)");
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

}  // namespace emulator
