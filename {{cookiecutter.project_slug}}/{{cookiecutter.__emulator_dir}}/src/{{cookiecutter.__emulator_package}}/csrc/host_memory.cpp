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
// By default the emulator is the second kind: every pinned allocation and
// registration gets a device alias, a reserved address range with no host
// access rights, and host_device_pointer (cudaHostGetDevicePointer) gives it;
// set_host_aliases(false) makes it the first kind.  In both, a kernel given
// pageable host memory fails its stream: no device can read it later, and so
// does one given a registration made without kHostRegisterMapped (CUDA's
// cudaHostRegisterMapped, 0x02, which LMCache's lazy allocator passes): it is
// pinned for copies but not mapped for kernels.
// Registrations follow the strictest runtime's rules: whole pages only (as
// aclrtHostRegister wants; LMCache's NPU pin backend widens its ranges so),
// and never over another registration (cudaErrorHostMemoryAlreadyRegistered).
// Nothing here allocates device memory or runs streams.

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
  uintptr_t alias;  // its device address when host memory is aliased, else 0
  bool mapped;      // whether kernels reach it (allocations always)
};
std::atomic<bool> g_aliases{true};
std::mutex g_host_mutex;                   // guards the three maps
std::map<uintptr_t, Pinned> g_allocated;   // pinned allocations
std::map<uintptr_t, Pinned> g_registered;  // host ranges registered (pinned)
std::map<uintptr_t, std::pair<uintptr_t, size_t>> g_alias_of;  // alias -> host
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

// A device address for [host, host + size): reserved, never host-accessible
// (host code that dereferences it crashes, as on a device).  Caller holds the
// lock.
uintptr_t new_alias(uintptr_t host, size_t size) {
  if (!g_aliases) return 0;
  void* alias = mmap(nullptr, size, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  TORCH_CHECK(alias != MAP_FAILED, "reserving a device alias of ", size,
              " bytes of host memory failed");
  const auto address = reinterpret_cast<uintptr_t>(alias);
  g_alias_of.emplace(address, std::make_pair(host, size));
  return address;
}

void drop_alias(const Pinned& pinned) {
  if (pinned.alias == 0) return;
  g_alias_of.erase(pinned.alias);
  munmap(reinterpret_cast<void*>(pinned.alias), pinned.size);
}

void free_pinned_memory(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_host_mutex);
    auto found = g_allocated.find(reinterpret_cast<uintptr_t>(ptr));
    if (found != g_allocated.end()) {
      drop_alias(found->second);
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
      g_allocated.emplace(address,
                          Pinned{nbytes, new_alias(address, nbytes), true});
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
  const bool mapped = flags & kHostRegisterMapped;
  g_registered.emplace(
      host, Pinned{bytes, mapped ? new_alias(host, bytes) : 0, mapped});
  return true;
}

bool host_unregister(int64_t ptr) {
  check_context("host_unregister");
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto found = g_registered.find(static_cast<uintptr_t>(ptr));
  if (found == g_registered.end()) return false;
  drop_alias(found->second);
  g_registered.erase(found);
  return true;
}

// A range is pinned when one registration or one pinned allocation holds it.
// A copy from anything else is a pageable copy: on hardware a bounce through a
// staging buffer, many times slower.  So is a copy across two registrations,
// even adjacent ones (LMCache's lazy allocator registers its buffer in pieces
// and passes their size, host_buffer_alignments, so copies split there).
bool host_is_pinned(int64_t ptr, int64_t size) {
  if (ptr <= 0 || size <= 0) return false;
  const auto begin = static_cast<uintptr_t>(ptr);
  const uintptr_t end = begin + static_cast<uintptr_t>(size);
  std::lock_guard<std::mutex> lock(g_host_mutex);
  return holding(g_allocated, begin, end) != g_allocated.end() ||
         holding(g_registered, begin, end) != g_registered.end();
}

// Whether a CPU tensor's bytes are pinned: allocated pinned or registered
// (CUDA treats both as page-locked).
bool is_pinned_host(const at::Tensor& t) {
  return host_is_pinned(reinterpret_cast<int64_t>(t.data_ptr()),
                        static_cast<int64_t>(t.nbytes()));
}

// Whether host memory [begin, begin + nbytes) is pinned but registered without
// kHostRegisterMapped: copies reach it, kernels do not.
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

// The device address of pinned host memory at `ptr`
// (cudaHostGetDevicePointer): ptr itself without aliases, else the alias of
// the allocation or registration holding it.  Pageable memory has none, and
// neither has a registration without kHostRegisterMapped.
int64_t host_device_pointer(int64_t ptr) {
  const auto host = static_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_host_mutex);
  for (const auto* ranges : {&g_allocated, &g_registered}) {
    auto range = holding(*ranges, host, host + 1);
    if (range == ranges->end()) continue;
    TORCH_CHECK(range->second.mapped, "0x", std::hex, host, std::dec,
                kUnmapped);
    const uintptr_t alias = range->second.alias;
    return static_cast<int64_t>(alias ? alias + (host - range->first) : host);
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
      if (address < alias + host.second) {
        TORCH_CHECK(
            offset >= 0 && nbytes >= 0 &&
                begin + static_cast<uintptr_t>(nbytes) <= alias + host.second,
            "illegal address: a kernel accessed ", nbytes, " bytes at offset ",
            offset, " from 0x", std::hex, address,
            ", outside the pinned host range mapped at 0x", alias, std::dec,
            " (", host.second,
            " bytes): a copy across two registrations reaches "
            "unmapped device addresses; split it at their boundaries");
        return reinterpret_cast<void*>(host.first + (begin - alias));
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
