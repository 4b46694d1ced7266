// SPDX-License-Identifier: Apache-2.0
//
// A host-memory PrivateUse1 device for hardware-free tests of an LMCache device
// plugin.
//
// Why it exists: LMCache dispatches on tensor.device.type, so a plugin for a
// device named "foo" is only exercised for real by tensors whose device really
// is "foo".  This extension gives torch such a device on a CPU-only host:
//   * device memory (memory.cpp) is not host-addressable: data_ptr() is a
//     device address; every allocation remembers its device; IPC follows
//     CUDA's rules;
//   * streams are asynchronous (streams.cpp): copies between host and device
//     memory and between devices run on the current stream's worker; other ops
//     run at once, after the work queued on the current stream (so a missing
//     wait between two streams, or between a stream and the host, shows);
//   * pinned host memory is tracked (host_memory.cpp), so pin_memory=True and
//     is_pinned() work, and kernels reach it only as the device would;
//   * every op without a kernel of its own (ops.cpp) runs the CPU kernel on the
//     host view of the device memory (`_to_cpu` returns zero-copy aliases).
//
// The device *name* is chosen in Python
// (torch.utils.rename_privateuse1_backend); nothing in this file knows it, so
// one source serves every rendered backend. Modelled on PyTorch's OpenReg test
// backend; it uses the same unstable C++ interfaces, so a large torch upgrade
// may need small edits here.
//
// Must not: be loaded into a production process.  It claims PrivateUse1 for the
// whole process, which a real vendor runtime (torch_npu, ...) also needs.

#include <ATen/ATen.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
// pybind11 with torch's type casters, for the module's bindings.
// <torch/extension.h> would parse libtorch's whole C++ API too: the emulator
// compiled in 114 s of CPU with it, 65 without.
#include <torch/csrc/utils/pybind.h>

#include "emulator.h"

#include <algorithm>
#include <atomic>
#include <cstring>

void bind_streams(pybind11::module& m);      // streams.cpp
void bind_host_memory(pybind11::module& m);  // host_memory.cpp
namespace emulator {
void bind_counters(pybind11::module& m);  // counters.cpp
}  // namespace emulator

namespace emulator {

std::atomic<c10::DeviceIndex> g_device_count{2};
thread_local c10::DeviceIndex t_current_device = 0;

void check_index(c10::DeviceIndex index) {
  TORCH_CHECK(index >= 0 && index < g_device_count.load(),
              "emulated device index ", static_cast<int>(index),
              " is out of range: this process has ",
              static_cast<int>(g_device_count.load()),
              " emulated devices (set the emulator's device-count variable "
              "before the first import to change it)");
}

}  // namespace emulator

namespace {

using namespace emulator;

// ---------------------------------------------------------------- memory --

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_on(t_current_device, nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_device_memory; }
  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    if (count) {
      std::memcpy(host_view(dest, count, -1), host_view(src, count, -1), count);
      emulator::count_copy(false, false, count);
      emulator::count(kCopies);
    }
  }
};
DeviceAllocator g_device_allocator;

}  // namespace

namespace emulator {

// A CPU tensor over the same bytes as a device tensor.  The CPU storage keeps
// the device storage alive, and is resizable so that an out= CPU kernel may
// grow it (the CPU fallback then copies the result back to the device).
at::Tensor host_alias(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kDevice) return t;
  const c10::Storage& storage = t.storage();
  char* bytes = storage.data() ? host_view(storage.data(), storage.nbytes(),
                                           t.device().index())
                               : nullptr;
  auto* keep_alive = new c10::Storage(storage);
  c10::DataPtr data(
      bytes, keep_alive,
      [](void* ctx) { delete static_cast<c10::Storage*>(ctx); },
      c10::Device(c10::DeviceType::CPU));
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                           std::move(data), c10::GetCPUAllocator(),
                           /*resizable=*/true);
  return at::empty({0}, t.options().device(c10::DeviceType::CPU))
      .set_(cpu_storage, t.storage_offset(), t.sizes(), t.strides());
}

}  // namespace emulator

namespace {

// ------------------------------------------------------------------ hooks --

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override {
    return true;
  }
  c10::DeviceIndex deviceCount() const override {
    return g_device_count.load();
  }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    check_index(index);
    set_current_device(index);
  }
  c10::DeviceIndex getCurrentDevice() const override {
    return t_current_device;
  }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const auto old = t_current_device;
    setCurrentDevice(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return pinned_allocator();
  }
  bool isPinnedPtr(const void* data) const override {
    return is_pinned_allocation(data);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    const auto index = device_of(reinterpret_cast<int64_t>(data));
    return at::Device(kDevice, index < 0
                                   ? t_current_device
                                   : static_cast<c10::DeviceIndex>(index));
  }
  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex /*index*/) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(),
                "Trying to resize storage that is not resizable");
    synchronize_worker(current_worker(impl->device().index()));
    c10::DataPtr fresh = allocate_on(impl->device().index(), new_bytes);
    const size_t keep = std::min(new_bytes, impl->nbytes());
    if (keep) {
      std::memcpy(host_view(fresh.get(), keep, -1),
                  host_view(impl->data(), keep, -1), keep);
      count_copy(false, false, keep);
      emulator::count(kCopies);
    }
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(new_bytes);
  }
};

bool g_hooks_registered = false;

void register_hooks(int64_t device_count) {
  TORCH_CHECK(device_count >= 1 && device_count <= kMaxDevices,
              "the emulated device count must be between 1 and ", kMaxDevices,
              ", got ", device_count);
  g_device_count = static_cast<c10::DeviceIndex>(device_count);
  if (!g_hooks_registered) {
    at::RegisterPrivateUse1HooksInterface(new Hooks());
    attribute_faults();
    g_hooks_registered = true;
  }
}

int64_t current_device() { return t_current_device; }
void set_device(int64_t index) {
  check_index(static_cast<c10::DeviceIndex>(index));
  set_current_device(static_cast<c10::DeviceIndex>(index));
}
int64_t device_count() { return g_device_count.load(); }

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);

// Events (events.cpp): what _streams.py's Event calls.
void bind_events(pybind11::module& m) {
  using namespace emulator;
  m.def("event_create", &event_create);
  m.def("event_destroy", &event_destroy);
  m.def("event_record", [](int64_t event, int64_t stream) {
    event_record(event, worker_of_handle(stream));
  });
  m.def("event_block", [](int64_t event, int64_t stream) {
    event_block(event, worker_of_handle(stream));
  });
  m.def("event_query", &event_query);
  m.def("event_synchronize", &event_synchronize);
  m.def("event_ipc_handle", &event_ipc_handle);
  m.def("event_open", &event_open);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Host-memory PrivateUse1 device (test and CI tool).";
  m.def("register_hooks", &register_hooks,
        "Make PrivateUse1 an accelerator with N devices.");
  m.def("current_device", &current_device);
  m.def("set_device", &set_device);
  m.def("device_count", &device_count);
  m.def("ipc_export", &ipc_export,
        "(pid, fd, identity, offset, size, allowlist fd) of the exportable "
        "allocation at an address.");
  m.def("ipc_open", &ipc_open,
        "Map an exported allocation (pid, fd, identity, size, device index, "
        "allowlist fd): its address here.");
  m.def("ipc_allow", &ipc_allow,
        "Allow a process to open a handle (pid, fd, identity) of ours.");
  m.def(
      "require_ipc_allowlist", [](bool on) { g_ipc_allowlist = on; },
      "Whether an importer must be allowed by the exporter.");
  m.def(
      "allocate_through_vmm", [](bool on) { g_vmm = on; },
      "Whether allocations go through the VMM API (no legacy IPC export).");
  m.def(
      "memory_is_vmm",
      [](int64_t ptr) {
        std::lock_guard<std::mutex> lock(g_mutex);
        const Mapping* mapping = find_holding(static_cast<uintptr_t>(ptr));
        return mapping != nullptr && mapping->vmm;
      },
      "Whether the allocation at an address came through the VMM API.");
  m.def("ipc_export_fd", &ipc_export_fd,
        "(descriptor, offset, size) of the allocation at an address (VMM).");
  m.def("ipc_open_fd", &ipc_open_fd,
        "Map an allocation by its descriptor (VMM): its address here.");
  m.def("ipc_close", &ipc_close,
        "Unmap an opened allocation, for every user in this process.");
  m.def("ipc_imports", &ipc_imports,
        "Open IPC mappings: [(address, size, device, exporting pid)].");
  m.def("device_of", &device_of,
        "The device owning an address of this process's emulated memory (-1: "
        "none).");
  m.def("empty_cache", &empty_cache,
        "Release the cached, currently unused shareable allocations.");
  m.def("set_faults", &set_faults,
        "Switch on injected faults (oom, ipc_open, host_register, "
        "device_lost); [] "
        "switches them off.");
  m.def(
      "kernel_address_translator",
      [] { return reinterpret_cast<int64_t>(&emulator_kernel_address); },
      "Address of void* emulator_kernel_address(int64_t base, int64_t offset, "
      "int64_t nbytes, int64_t access): how the emulator's kernels reach "
      "device memory (access, for the counters: 0 read, 1 copied from, 2 "
      "copied to).");
  bind_streams(m);
  bind_events(m);
  bind_host_memory(m);
  emulator::bind_counters(m);
}
