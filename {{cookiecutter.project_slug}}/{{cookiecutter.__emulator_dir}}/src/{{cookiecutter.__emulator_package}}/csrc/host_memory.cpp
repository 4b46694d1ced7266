// SPDX-License-Identifier: Apache-2.0
//
// Host memory as the emulated device sees it: pinned allocations, host
// registrations, and the address a kernel reaches them at.
//
// Why it exists: a device reaches host memory in one of two ways, and a plugin
// must not assume which.
//   * copies (a DMA engine: cudaMemcpyAsync, aclrtMemcpyAsync, torch's copy_)
//     take the host address, pinned or not (ops.cpp: pageable sources are
//     captured first, pageable destinations waited for);
//   * a kernel reads host memory only where it is pinned and mapped for the
//     device.  On CUDA (unified addressing) that is the host address itself;
//     on a runtime whose registration returns a separate device address
//     (Ascend's aclrtHostRegister gives devPtr), only that address works.
// By default the emulator is the second kind, per device: host_device_pointer
// (cudaHostGetDevicePointer) gives the current device's alias of pinned memory
// (never host-accessible), and a kernel on another device is refused (TP=2:
// one server, two devices, one L1); set_host_aliases(false): the first kind.
// In both, a kernel given pageable memory fails its stream, and so does one
// given a registration made without kHostRegisterMapped (0x02, which LMCache's
// lazy allocator passes: pinned for copies, not mapped for kernels).  A
// registration is whole pages (aclrtHostRegister's rule), never over another
// (cudaErrorHostMemoryAlreadyRegistered).  Nothing here runs streams.

#include <c10/core/Allocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#include "emulator.h"

namespace emulator {

namespace {

struct Pinned {
  size_t size;
  bool mapped;  // whether kernels reach it (allocations always)
  std::map<c10::DeviceIndex, uintptr_t> aliases{};  // per device, once asked
};
struct Alias {
  uintptr_t host;
  size_t size;
  c10::DeviceIndex device;
};
std::atomic<bool> g_aliases{true};
std::mutex g_host_mutex;                   // guards the three maps
std::map<uintptr_t, Pinned> g_allocated;   // pinned allocations
std::map<uintptr_t, Pinned> g_registered;  // host ranges registered (pinned)
std::map<uintptr_t, Alias> g_alias_of;     // alias -> host range
constexpr int64_t kHostRegisterMapped = 0x02;  // cudaHostRegisterMapped
constexpr int64_t kHostRegisterFlags = 0x0f;  // portable, mapped, io, read-only

// The range of `ranges` holding [begin, end), or end(): caller holds the lock.
std::map<uintptr_t, Pinned>::const_iterator holding(
    const std::map<uintptr_t, Pinned>& ranges, uintptr_t begin, uintptr_t end) {
  auto next = ranges.upper_bound(begin);
  if (next == ranges.begin()) return ranges.end();
  auto range = std::prev(next);
  return end <= range->first + range->second.size ? range : ranges.end();
}

// `device`'s address of pinned [host, host + pinned.size), reserved on first
// use (host code that dereferences it crashes), or host without aliases.
uintptr_t alias_on(uintptr_t host, Pinned& pinned, c10::DeviceIndex device) {
  if (!g_aliases) return host;
  auto known = pinned.aliases.find(device);
  if (known != pinned.aliases.end()) return known->second;
  void* alias = mmap(nullptr, pinned.size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TORCH_CHECK(alias != MAP_FAILED, "reserving a device alias of ", pinned.size,
              " bytes of host memory failed");
  const auto address = reinterpret_cast<uintptr_t>(alias);
  g_alias_of.emplace(address, Alias{host, pinned.size, device});
  pinned.aliases.emplace(device, address);
  return address;
}

void drop_aliases(const Pinned& pinned) {
  for (const auto& [device, alias] : pinned.aliases) {
    g_alias_of.erase(alias);
    munmap(reinterpret_cast<void*>(alias), pinned.size);
  }
}

void free_pinned_memory(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_host_mutex);
    auto found = g_allocated.find(reinterpret_cast<uintptr_t>(ptr));
    if (found != g_allocated.end()) {
      drop_aliases(found->second);
      g_allocated.erase(found);
    }
  }
  c10::free_cpu(ptr);
}

// "Pinned" host memory: plain host memory that remembers it was pinned, so
// torch.empty(..., pin_memory=True), .pin_memory() and .is_pinned() behave.
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr) {
      const auto address = reinterpret_cast<uintptr_t>(ptr);
      std::lock_guard<std::mutex> lock(g_host_mutex);
      g_allocated[address] = Pinned{nbytes, true};
    }
    return {ptr, ptr, &free_pinned_memory, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned_memory; }
  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }
};
PinnedAllocator g_pinned_allocator;

}  // namespace

std::atomic<bool> g_fault_host_register{false};

c10::Allocator* pinned_allocator() { return &g_pinned_allocator; }

bool is_pinned_allocation(const void* ptr) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  return g_allocated.count(reinterpret_cast<uintptr_t>(ptr)) != 0;
}

// Register (pin) host memory for fast asynchronous copies (cudaHostRegister,
// aclrtHostRegister); with kHostRegisterMapped kernels reach it too.  Refused
// (false): NULL, empty, not whole pages, unknown flags, a range overlapping a
// registration, and everything under the host_register fault.
bool host_register(int64_t ptr, int64_t size, int64_t flags) {
  check_context("host_register");
  const auto page = static_cast<int64_t>(sysconf(_SC_PAGESIZE));
  if (ptr <= 0 || size <= 0 || ptr % page || size % page ||
      (flags & ~kHostRegisterFlags) || g_fault_host_register) {
    return false;
  }
  const auto host = static_cast<uintptr_t>(ptr);
  const auto bytes = static_cast<size_t>(size);
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto next = g_registered.lower_bound(host);
  if (next != g_registered.end() && next->first < host + bytes) return false;
  if (next != g_registered.begin() &&
      std::prev(next)->first + std::prev(next)->second.size > host) {
    return false;
  }
  g_registered[host] = Pinned{bytes, (flags & kHostRegisterMapped) != 0};
  return true;
}

bool host_unregister(int64_t ptr) {
  check_context("host_unregister");
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto found = g_registered.find(static_cast<uintptr_t>(ptr));
  if (found == g_registered.end()) return false;
  drop_aliases(found->second);
  g_registered.erase(found);
  return true;
}

// Pinned: one registration or pinned allocation holds it.  Anything else, a
// copy across two registrations too (LMCache splits at host_buffer_alignments),
// is a pageable copy: on hardware a bounce buffer, many times slower.
bool host_is_pinned(int64_t ptr, int64_t size) {
  if (ptr <= 0 || size <= 0) return false;
  const auto begin = static_cast<uintptr_t>(ptr);
  const uintptr_t end = begin + static_cast<uintptr_t>(size);
  std::lock_guard<std::mutex> lock(g_host_mutex);
  return holding(g_allocated, begin, end) != g_allocated.end() ||
         holding(g_registered, begin, end) != g_registered.end();
}

// A CPU tensor's bytes allocated pinned or registered (both page-locked).
bool is_pinned_host(const at::Tensor& t) {
  return host_is_pinned(reinterpret_cast<int64_t>(t.data_ptr()),
                        static_cast<int64_t>(t.nbytes()));
}

// Registered without kHostRegisterMapped: copies reach it, kernels do not.
static bool host_is_unmapped(uintptr_t begin, int64_t nbytes) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto range =
      holding(g_registered, begin, begin + static_cast<size_t>(nbytes));
  return range != g_registered.end() && !range->second.mapped;
}

constexpr const char* kUnmapped =
    " is registered without the mapped flag (0x02, cudaHostRegisterMapped; "
    "Ascend's only type, ACL_HOST_REGISTER_MAPPED): copies reach it, kernels "
    "do not. Register it with that flag.";

// The current device's address of pinned host memory at `ptr`
// (cudaHostGetDevicePointer): ptr itself without aliases, else that device's
// alias of the allocation or registration holding it.  Pageable memory has
// none, and neither has a registration without kHostRegisterMapped.
int64_t host_device_pointer(int64_t ptr) {
  const auto host = static_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_host_mutex);
  for (auto* ranges : {&g_allocated, &g_registered}) {
    auto range = holding(*ranges, host, host + 1);
    if (range == ranges->end()) continue;
    TORCH_CHECK(range->second.mapped, "0x", std::hex, host, std::dec,
                kUnmapped);
    auto& pinned = (*ranges)[range->first];
    const uintptr_t base = alias_on(range->first, pinned, t_current_device);
    return static_cast<int64_t>(base + (host - range->first));
  }
  TORCH_CHECK(false, "0x", std::hex, host, std::dec,
              " is not pinned host memory: it has no device address (register "
              "it with host_register, or allocate it pinned)");
  return 0;  // not reached
}

// emulator_kernel_address for an address outside device memory: a device
// alias of pinned host memory reaches its host bytes; a host address only
// when host memory is not aliased and the range is pinned.  Anything else is
// refused, and fails the kernel's stream.
void* host_kernel_address(uintptr_t address, int64_t offset, int64_t nbytes) {
  const uintptr_t begin = address + static_cast<uintptr_t>(offset);
  {
    std::lock_guard<std::mutex> lock(g_host_mutex);
    auto next = g_alias_of.upper_bound(address);
    if (next != g_alias_of.begin()) {
      const auto& [alias, host] = *std::prev(next);
      if (address < alias + host.size) {
        TORCH_CHECK(
            offset >= 0 && nbytes >= 0 &&
                begin + static_cast<uintptr_t>(nbytes) <= alias + host.size,
            "illegal address: a kernel accessed ", nbytes, " bytes at offset ",
            offset, " from 0x", std::hex, address,
            ", outside the pinned host range mapped at 0x", alias, std::dec,
            " (", host.size,
            " bytes): a copy across two registrations reaches "
            "unmapped device addresses; split it at their boundaries");
        const c10::DeviceIndex device = running_device();
        TORCH_CHECK(device < 0 || device == host.device, "a kernel on device ",
                    int(device), " was given 0x", std::hex, address, std::dec,
                    ", device ", int(host.device),
                    "'s address of pinned host memory: each device reaches "
                    "it at its own address; ask for it with that device "
                    "current (host_device_pointer)");
        return reinterpret_cast<void*>(host.host + (begin - alias));
      }
    }
  }
  TORCH_CHECK(host_is_pinned(static_cast<int64_t>(begin), nbytes), "a kernel ",
              "was given host address 0x", std::hex, begin, std::dec, " (",
              nbytes,
              " bytes) of pageable host memory: no device can read it "
              "from a kernel that runs later. Pin (register) it, or copy it "
              "synchronously instead of launching a kernel on it.");
  TORCH_CHECK(!host_is_unmapped(begin, nbytes), "a kernel was given 0x",
              std::hex, begin, std::dec, ", which", kUnmapped);
  TORCH_CHECK(!g_aliases, "a kernel was given host address 0x", std::hex, begin,
              std::dec,
              " of pinned host memory, but this runtime maps "
              "host memory at a separate device address (as Ascend's "
              "aclrtHostRegister does): pass the device address the runtime "
              "gives for it (host_device_pointer; keep the one registration "
              "returns)");
  return reinterpret_cast<void*>(begin);
}

}  // namespace emulator

void bind_host_memory(pybind11::module& m) {
  using namespace emulator;
  m.def("host_register", &host_register, pybind11::arg("ptr"),
        pybind11::arg("size"), pybind11::arg("flags") = 0,
        "Register (pin) whole pages of host memory (flags: 0x02 maps them for "
        "kernels): False if the runtime refuses it.");
  m.def("host_unregister", &host_unregister,
        "Unregister a host range registered by host_register.");
  m.def("host_is_pinned", &host_is_pinned,
        "Whether a host range is pinned (registered, or a pinned allocation).");
  m.def("host_device_pointer", &host_device_pointer,
        "The device address of pinned host memory (cudaHostGetDevicePointer).");
  m.def(
      "set_host_aliases",
      [](bool on) {
        std::lock_guard<std::mutex> lock(g_host_mutex);
        TORCH_CHECK(g_allocated.empty() && g_registered.empty(),
                    "set host aliasing before any host memory is pinned");
        g_aliases = on;
      },
      "True: pinned host memory has a separate device address (Ascend); "
      "False: the device reaches it at its host address (CUDA).");
}
