// SPDX-License-Identifier: Apache-2.0
//
// The emulated device's memory: not host-addressable, one address space per
// device, exportable to other processes with CUDA's IPC rules.
//
// Why it exists: on a device, host code that dereferences a device pointer
// crashes, memory belongs to one device, and an IPC mapping is one per process
// and allocation.  A plugin that breaks these rules must fail here too.
//   * every allocation is two mappings: a device-address range reserved
//     without access rights (what data_ptr() and IPC hand out) and a host
//     shadow of the same bytes.  Only the emulator's copies, kernels (through
//     emulator_kernel_address) and CPU fallback reach the shadow; a host read
//     or write of a device address crashes (faults.cpp names the memory);
//   * allocations remember their device; an op that uses one device's memory
//     as another's, or host memory as device memory, fails;
//   * allocations of 64 KiB and more live in memfd shared memory, exportable by
//     handle (pid, fd, identity); nothing is named in /dev/shm; freed ones are
//     cached per device for reuse (empty_cache());
//   * IPC (ipc.cpp): one mapping per (process, allocation) however often a
//     handle is opened; one close unmaps it for every user;
//   * injected faults (faults.cpp): out of memory, a failed IPC open, a lost
//   device.

#include "emulator.h"

#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace emulator {

std::mutex g_mutex;

std::map<uintptr_t, Mapping> g_mappings;
std::atomic<bool> g_vmm{false};

namespace {

size_t pages(size_t nbytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (std::max<size_t>(nbytes, 1) + page - 1) / page * page;
}

}  // namespace

void* reserve_addresses(size_t nbytes) {
  void* ptr = mmap(nullptr, pages(nbytes), PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TORCH_CHECK(ptr != MAP_FAILED, "reserving ", nbytes,
              " bytes of device addresses failed: ", std::strerror(errno));
  return ptr;
}

char* map_shared(int fd, size_t nbytes) {
  void* ptr = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  TORCH_CHECK(ptr != MAP_FAILED, "mmap of ", nbytes,
              " bytes failed: ", std::strerror(errno));
  return static_cast<char*>(ptr);
}

namespace {

struct Cached {
  void* address;
  int fd;
  char* shadow;
};
constexpr size_t kCacheLimitBytes = size_t(1) << 30;
std::multimap<std::pair<c10::DeviceIndex, size_t>, Cached>
    g_cached;  // per device, as a caching allocator
size_t g_cached_bytes = 0;

void release_shadow(
    const Mapping& m) {  // the host view and the memory behind it
  if (m.fd == kPrivate) {
    c10::free_cpu(m.shadow);
  } else if (m.shadow != nullptr) {
    munmap(m.shadow, m.size);
  }
  if (m.fd >= 0) close(m.fd);
}

void release(void* address, const Mapping& m) {
  release_shadow(m);
  munmap(address, pages(m.size));
}

}  // namespace

const Mapping* find_holding(uintptr_t address,
                            uintptr_t* base) {  // caller holds g_mutex
  auto it = g_mappings.upper_bound(address);
  if (it == g_mappings.begin()) return nullptr;
  --it;
  if (address >= it->first + std::max<size_t>(it->second.size, 1))
    return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

c10::DataPtr allocate_on(c10::DeviceIndex index, size_t nbytes) {
  const c10::DeleterFnPtr deleter = &free_device_memory;
  const c10::Device device(kDevice, index);
  // Before the empty case: a lost device refuses every allocation, an empty
  // one too, as a CUDA context with a sticky error fails every call after it.
  check_device(index);
  if (nbytes == 0) return {nullptr, nullptr, deleter, device};
  TORCH_CHECK_WITH(
      OutOfMemoryError, !(g_fault_oom && nbytes >= kShareableBytes),
      "emulated device ", device, " is out of memory: tried to allocate ",
      nbytes, " bytes (fault injected: oom)");
  Mapping mapping{kPrivate, nbytes, index};
  mapping.stream = current_worker(index);  // where its free is ordered
  mapping.vmm = g_vmm;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto cached = nbytes >= kShareableBytes ? g_cached.find({index, nbytes})
                                            : g_cached.end();
    if (cached != g_cached.end()) {
      const Cached entry = cached->second;
      g_cached.erase(cached);
      g_cached_bytes -= nbytes;
      g_mappings[reinterpret_cast<uintptr_t>(entry.address)] =
          Mapping{entry.fd, nbytes,       index,          0,
                  0,        entry.shadow, mapping.stream, mapping.vmm};
      return {entry.address, entry.address, deleter, device};
    }
  }
  if (nbytes < kShareableBytes) {
    mapping.shadow = static_cast<char*>(c10::alloc_cpu(nbytes));
  } else {
    mapping.fd = memfd_create("lmcache-emulated-device", MFD_CLOEXEC);
    TORCH_CHECK(mapping.fd >= 0, "memfd_create failed: ", std::strerror(errno));
    if (ftruncate(mapping.fd, static_cast<off_t>(nbytes)) != 0 ||
        (mapping.shadow = static_cast<char*>(
             mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED,
                  mapping.fd, 0))) == MAP_FAILED) {
      const int err = errno;
      close(mapping.fd);
      TORCH_CHECK(
          false, "allocating ", nbytes,
          " bytes of emulated device memory failed: ", std::strerror(err));
    }
  }
  void* address = nullptr;
  try {
    address = reserve_addresses(nbytes);
  } catch (...) {
    release_shadow(mapping);  // no device addresses were reserved
    throw;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  g_mappings[reinterpret_cast<uintptr_t>(address)] = mapping;
  return {address, address, deleter, device};
}

namespace {
void free_now(void* address) {
  Mapping mapping{kClosed, 0};
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_mappings.find(reinterpret_cast<uintptr_t>(address));
    if (it == g_mappings.end()) return;
    mapping = it->second;
    g_mappings.erase(it);
    if (mapping.fd >= 0 && g_cached_bytes + mapping.size <= kCacheLimitBytes) {
      g_cached.emplace(std::make_pair(mapping.device, mapping.size),
                       Cached{address, mapping.fd, mapping.shadow});
      g_cached_bytes += mapping.size;
      return;
    }
  }
  release(address, mapping);
}
}  // namespace

// Stream-ordered, as torch's caching allocators are on CUDA and Ascend: memory
// freed while work is queued on the stream it was allocated on stays valid for
// that work (a kernel still reads the tables it was launched with) and is
// released behind it, whichever thread frees it.
void free_device_memory(void* address) {
  if (address == nullptr) return;
  Worker* worker = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_mappings.find(reinterpret_cast<uintptr_t>(address));
    if (it == g_mappings.end()) return;
    worker = it->second.stream;
  }
  try {
    if (worker != nullptr && !worker_idle(worker)) {
      enqueue(worker, [address] { free_now(address); }, /*always=*/true);
      return;
    }
  } catch (const std::exception&) {  // a lost device: nothing runs on it
  }
  free_now(address);
}

void empty_cache() {
  decltype(g_cached) released;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    released.swap(g_cached);
    g_cached_bytes = 0;
  }
  for (auto& [key, entry] : released)
    release(entry.address,
            Mapping{entry.fd, key.second, key.first, 0, 0, entry.shadow});
}

}  // namespace emulator
