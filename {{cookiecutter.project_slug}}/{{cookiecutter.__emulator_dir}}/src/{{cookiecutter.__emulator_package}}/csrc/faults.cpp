// SPDX-License-Identifier: Apache-2.0
//
// Faults a test switches on (set_faults), and the device losses they cause.
//
// Why it exists: a device runtime fails in ways a plugin must survive: it runs
// out of memory, refuses a mapping or a host registration, and a device can be
// lost in the middle of a transfer.  Each fault fails the call with the error a
// runtime would give, so that a test can see the plugin report it (no hang, no
// wrong byte stored).
//   * oom: device allocations of kShareableBytes and more fail (memory.cpp);
//   * ipc_open: opening an IPC memory handle fails (memory.cpp);
//   * host_register: registering (pinning) host memory is refused, as when the
//     runtime's locked-memory limit is reached (RLIMIT_MEMLOCK);
//   * device_lost: the next copy of kShareableBytes or more (a KV transfer,
//     not a pointer table), or the next kernel, loses its device: the copy
//     stops halfway, the kernel never runs.  From then on every call on that
//     device fails (CUDA's cudaErrorDeviceUnavailable): queued work is
//     dropped, synchronizations raise, events recorded on it fail, in this
//     process and in every process that imported them.
// A host access to device memory crashes here too; the crash is attributed
// first (attribute_faults).  Nothing here allocates device memory or runs
// streams.

#include "emulator.h"

#include <c10/util/Exception.h>

#include <signal.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace emulator {

std::atomic<bool> g_fault_oom{false}, g_fault_ipc_open{false};

namespace {

std::atomic<bool> g_fault_device_lost{false};
std::array<std::atomic<bool>, kMaxDevices> g_lost{};

struct sigaction g_previous_segv{};

// A host access to device addresses faults: say which memory before the
// previous handler (Python's faulthandler prints the traceback) takes over.
void on_segv(int signal_number, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  uintptr_t base = 0;
  c10::DeviceIndex device = 0;
  if (holder_of(address, &device, &base)) {
    char message[400];
    const int n = std::snprintf(
        message, sizeof(message),
        "\nemulated device memory at 0x%lx (device %d, allocation 0x%lx) was "
        "read or written "
        "by host code: device memory is not host-addressable. Copy it with a "
        "device op or "
        "kernel (tensor.cpu(), copy_) instead of dereferencing its address.\n",
        static_cast<unsigned long>(address), static_cast<int>(device),
        static_cast<unsigned long>(base));
    if (n > 0) (void)!write(STDERR_FILENO, message, static_cast<size_t>(n));
  }
  sigaction(SIGSEGV, &g_previous_segv,
            nullptr);  // the faulting access repeats under it
  (void)signal_number;
  (void)context;
}

}  // namespace

// Each call starts from healthy devices: lost ones come back and streams forget
// their errors (a test's clean-up; a real device needs a process restart).
void set_faults(const std::vector<std::string>& faults) {
  g_fault_oom = g_fault_ipc_open = g_fault_host_register = g_fault_device_lost =
      false;
  for (auto& lost : g_lost) lost = false;
  clear_stream_failures();
  for (const std::string& fault : faults) {
    if (fault == "oom") {
      g_fault_oom = true;
    } else if (fault == "ipc_open") {
      g_fault_ipc_open = true;
    } else if (fault == "host_register") {
      g_fault_host_register = true;
    } else if (fault == "device_lost") {
      g_fault_device_lost = true;
    } else {
      TORCH_CHECK(false, "unknown emulator fault ", fault,
                  ": expected oom, ipc_open, host_register or device_lost");
    }
  }
}

bool take_transfer_fault() {
  bool armed = true;
  return g_fault_device_lost.compare_exchange_strong(armed, false);
}

std::string lost_message(c10::DeviceIndex device) {
  return "emulated device " + c10::Device(kDevice, device).str() +
         " was lost during a transfer (fault injected: device_lost): every "
         "call on it fails from now on, as with "
         "cudaErrorDeviceUnavailable; the process must report the failure and "
         "restart";
}

[[noreturn]] void lose_device(c10::DeviceIndex device) {
  g_lost.at(device) = true;
  TORCH_CHECK(false, lost_message(device));
  std::abort();  // not reached: TORCH_CHECK(false, ...) throws
}

bool device_lost(c10::DeviceIndex device) {
  return device >= 0 && device < kMaxDevices && g_lost[device].load();
}

void check_device(c10::DeviceIndex device) {
  TORCH_CHECK(!device_lost(device), lost_message(device));
}

void attribute_faults() {
  struct sigaction action{};
  action.sa_sigaction = &on_segv;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGSEGV, &action, &g_previous_segv);
}

// Lookups in memory.cpp's allocations: the emulator's host view of device
// bytes, and which device and allocation hold an address.
char* host_view(const void* address, size_t nbytes, c10::DeviceIndex device) {
  const auto start = reinterpret_cast<uintptr_t>(address);
  std::lock_guard<std::mutex> lock(g_mutex);
  uintptr_t base = 0;
  const Mapping* mapping = find_holding(start, &base);
  TORCH_CHECK(mapping != nullptr, "0x", std::hex, start, std::dec,
              " is not emulated device memory of this ",
              "process: a device tensor over host memory, or over memory "
              "already freed (allocate device buffers ",
              "on the device, and keep the tensor that owns them alive)");
  TORCH_CHECK(mapping->fd != kClosed, "emulated device memory at 0x", std::hex,
              start, " belongs to an IPC mapping ", "(base 0x", base, std::dec,
              ") that was closed: every user of an opened allocation shares "
              "one mapping, ",
              "and one close unmaps it for all of them. Keep a per-process "
              "registry that counts opens and closes ",
              "the handle only when its last user closes.");
  TORCH_CHECK(device < 0 || mapping->device == device,
              "emulated device memory at 0x", std::hex, start, std::dec,
              " belongs to ", c10::Device(kDevice, mapping->device),
              " but is used as ", c10::Device(kDevice, device),
              ": take the device from the memory (a pointer-attribute query), "
              "not from the current device.");
  check_device(mapping->device);
  TORCH_CHECK(start + nbytes <= base + mapping->size, "a view of ", nbytes,
              " bytes at 0x", std::hex, start,
              " runs past the end of its allocation (0x", base, " + ", std::dec,
              mapping->size, " bytes)");
  return mapping->shadow + (start - base);
}

int64_t device_of(int64_t ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const Mapping* mapping = find_holding(static_cast<uintptr_t>(ptr));
  return mapping && mapping->fd != kClosed ? mapping->device : -1;
}

// For the crash handler (on_segv): which device and allocation hold an
// address.  Takes no lock: the process is crashing.
bool holder_of(uintptr_t address, c10::DeviceIndex* device, uintptr_t* base) {
  const Mapping* mapping = find_holding(address, base);
  if (mapping != nullptr) *device = mapping->device;
  return mapping != nullptr;
}

}  // namespace emulator

// How the emulator's kernels reach memory: `nbytes` at `offset` from `base`,
// an address the kernel was given (a layer, a chunk object).  In device memory
// the access must lie in base's allocation: one that runs past it (a block id
// one past the end) fails the kernel's stream, as a device reports an illegal
// address (CUDA's sticky cudaErrorIllegalAddress), instead of reaching a
// neighbouring allocation.  Host memory is reached as the device would reach
// it (host_memory.cpp).  On a device, kernels use device addresses directly.
// `access` says what the kernel does with the bytes, for the counters
// (counters.cpp pairs what it copies from with what it copies to).
extern "C" void* emulator_kernel_address(int64_t base, int64_t offset,
                                         int64_t nbytes, int64_t access) {
  const auto address = static_cast<uintptr_t>(base);
  {
    std::lock_guard<std::mutex> lock(emulator::g_mutex);
    uintptr_t start = 0;
    const emulator::Mapping* mapping = emulator::find_holding(address, &start);
    TORCH_CHECK(mapping == nullptr || mapping->shadow != nullptr,
                "a kernel was given 0x", std::hex, address, std::dec,
                ", in an IPC mapping that was closed");
    if (mapping != nullptr) {
      const uintptr_t from = address - start;  // base's offset in it
      TORCH_CHECK(offset >= 0 && nbytes >= 0 &&
                      from + static_cast<uintptr_t>(offset) +
                              static_cast<uintptr_t>(nbytes) <=
                          mapping->size,
                  "illegal address: a kernel accessed ", nbytes,
                  " bytes at offset ", offset, " from 0x", std::hex, address,
                  ", outside its allocation (0x", start, " + ", std::dec,
                  mapping->size, " bytes)");
      char* bytes = mapping->shadow + from + static_cast<uintptr_t>(offset);
      emulator::count_kernel_access(/*host=*/false, nbytes, access);
      return bytes;
    }
  }
  void* bytes = emulator::host_kernel_address(address, offset, nbytes);
  emulator::count_kernel_access(/*host=*/true, nbytes, access);
  return bytes;
}
