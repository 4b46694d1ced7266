// SPDX-License-Identifier: Apache-2.0
//
// A host-memory PrivateUse1 device for hardware-free tests of an LMCache device
// plugin.
//
// Why it exists: LMCache dispatches on tensor.device.type, so a plugin for a
// device named "foo" is only exercised for real by tensors whose device really
// is "foo".  This extension gives torch such a device on a CPU-only host:
//   * device memory is ordinary host memory, so data_ptr() is a host address;
//   * streams and events exist but are synchronous (work is done on return);
//   * pinned host memory is tracked, so pin_memory=True and is_pinned() work;
//   * allocations of 64 KiB and more live in memfd shared memory, so another
//     process can map them through an IPC handle (pid, fd), the way device
//     runtimes export memory; nothing is ever named in /dev/shm; freed ones
//     are cached for reuse, like a device caching allocator (empty_cache());
//   * every op without a kernel here runs the CPU kernel directly on the
//     device memory (the `_to_cpu` kernel below returns zero-copy aliases).
//
// The device *name* is chosen in Python (torch.utils.rename_privateuse1_backend);
// nothing in this file knows it, so one source serves every rendered backend.
// Modelled on PyTorch's OpenReg test backend; it uses the same unstable C++
// interfaces, so a large torch upgrade may need small edits here.
//
// Must not: be loaded into a production process.  It claims PrivateUse1 for the
// whole process, which a real vendor runtime (torch_npu, ...) also needs.

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/NativeFunctions.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_set>

namespace {

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 16;

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

// ---------------------------------------------------------------- memory --

// Allocations at least this large are exportable to other processes.
constexpr size_t kShareableBytes = 64 * 1024;

struct Mapping {
  int fd;       // the memfd (-1 for a mapping imported from another process)
  size_t size;  // bytes mapped
};
std::mutex g_mapping_mutex;
std::map<uintptr_t, Mapping> g_mappings;  // base address -> mapping

// Freed shareable allocations are kept for reuse, as device caching allocators
// do: a fresh mapping costs a memfd, an mmap and a page fault per 4 KiB touched,
// which would dominate every op that makes large temporaries.
constexpr size_t kCacheLimitBytes = size_t(1) << 30;
std::multimap<size_t, std::pair<void*, int>> g_cached;  // size -> (address, memfd)
size_t g_cached_bytes = 0;

void free_device_memory(void* ptr) {
  Mapping mapping{-1, 0};
  bool mapped = false;
  {
    std::lock_guard<std::mutex> lock(g_mapping_mutex);
    auto it = g_mappings.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != g_mappings.end()) {
      mapping = it->second;
      mapped = true;
      g_mappings.erase(it);
      if (mapping.fd >= 0 && g_cached_bytes + mapping.size <= kCacheLimitBytes) {
        g_cached.emplace(mapping.size, std::make_pair(ptr, mapping.fd));
        g_cached_bytes += mapping.size;
        return;
      }
    }
  }
  if (!mapped) {
    c10::free_cpu(ptr);
    return;
  }
  munmap(ptr, mapping.size);
  if (mapping.fd >= 0) close(mapping.fd);
}

// Release every cached mapping (torch.<device>.empty_cache()).
void empty_cache() {
  std::multimap<size_t, std::pair<void*, int>> released;
  {
    std::lock_guard<std::mutex> lock(g_mapping_mutex);
    released.swap(g_cached);
    g_cached_bytes = 0;
  }
  for (auto& [size, entry] : released) {
    munmap(entry.first, size);
    close(entry.second);
  }
}

void* map_shared(int fd, size_t nbytes) {
  void* ptr = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  TORCH_CHECK(ptr != MAP_FAILED, "mmap of ", nbytes, " bytes failed: ", std::strerror(errno));
  return ptr;
}

c10::DataPtr allocate_on(c10::DeviceIndex index, size_t nbytes) {
  const c10::Device device(kDevice, index);
  if (nbytes < kShareableBytes) {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    // The device tag matters: a TensorImpl takes its device from its storage.
    return {ptr, ptr, &free_device_memory, device};
  }
  {
    std::lock_guard<std::mutex> lock(g_mapping_mutex);
    auto cached = g_cached.find(nbytes);
    if (cached != g_cached.end()) {
      auto [ptr, fd] = cached->second;
      g_cached.erase(cached);
      g_cached_bytes -= nbytes;
      g_mappings[reinterpret_cast<uintptr_t>(ptr)] = Mapping{fd, nbytes};
      return {ptr, ptr, &free_device_memory, device};
    }
  }
  const int fd = memfd_create("lmcache-emulated-device", MFD_CLOEXEC);
  TORCH_CHECK(fd >= 0, "memfd_create failed: ", std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(nbytes)) != 0) {
    const int err = errno;
    close(fd);
    TORCH_CHECK(false, "ftruncate to ", nbytes, " bytes failed: ", std::strerror(err));
  }
  void* ptr = nullptr;
  try {
    ptr = map_shared(fd, nbytes);
  } catch (...) {
    close(fd);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(g_mapping_mutex);
    g_mappings[reinterpret_cast<uintptr_t>(ptr)] = Mapping{fd, nbytes};
  }
  return {ptr, ptr, &free_device_memory, device};
}

struct DeviceAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    return allocate_on(t_current_device, nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_device_memory; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }
};
DeviceAllocator g_device_allocator;

std::mutex g_pinned_mutex;
std::unordered_set<const void*> g_pinned;

void free_pinned_memory(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

// "Pinned" host memory: plain host memory that remembers it was pinned, so
// torch.empty(..., pin_memory=True), .pin_memory() and .is_pinned() behave.
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mutex);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &free_pinned_memory, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &free_pinned_memory; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (count) std::memcpy(dest, src, count);
  }
};
PinnedAllocator g_pinned_allocator;

// A CPU tensor over the same bytes as a device tensor.  The CPU storage keeps
// the device storage alive, and is resizable so that an out= CPU kernel may
// grow it (the CPU fallback then copies the result back to the device).
at::Tensor host_alias(const at::Tensor& t) {
  if (!t.defined() || t.device().type() != kDevice) return t;
  const c10::Storage& storage = t.storage();
  auto* keep_alive = new c10::Storage(storage);
  c10::DataPtr data(storage.mutable_data(), keep_alive,
                    [](void* ctx) { delete static_cast<c10::Storage*>(ctx); },
                    c10::Device(c10::DeviceType::CPU));
  c10::Storage cpu_storage(c10::Storage::use_byte_size_t(), storage.nbytes(),
                           std::move(data), c10::GetCPUAllocator(),
                           /*resizable=*/true);
  return at::empty({0}, t.options().device(c10::DeviceType::CPU))
      .set_(cpu_storage, t.storage_offset(), t.sizes(), t.strides());
}

// --------------------------------------------------------------- kernels --

at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> /*layout*/,
                               std::optional<at::Device> device,
                               std::optional<bool> /*pin_memory*/,
                               std::optional<at::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(size, &g_device_allocator, keys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> /*layout*/,
                         std::optional<at::Device> device,
                         std::optional<bool> /*pin_memory*/) {
  c10::OptionalDeviceGuard guard(device);
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride, &g_device_allocator,
                                           keys, c10::dtype_or_default(dtype));
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst,
                     bool /*non_blocking*/) {
  at::Tensor src_host = host_alias(self);
  at::Tensor dst_host = host_alias(dst);
  const bool same_bytes = src_host.data_ptr() == dst_host.data_ptr() &&
                          src_host.sizes() == dst_host.sizes() &&
                          src_host.strides() == dst_host.strides() &&
                          src_host.dtype() == dst_host.dtype();
  if (!same_bytes) dst_host.copy_(src_host);  // synchronous: host memory
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  return at::_local_scalar_dense(host_alias(self));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size,
                      c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::cpu::as_strided(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size,
                         c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dim, int64_t size,
                  int64_t step) {
  return at::native::unfold(self, dim, size, step);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<at::MemoryFormat> memory_format) {
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  return at::cpu::set_(self, source);
}

at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source,
                               int64_t storage_offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  return at::cpu::set_(self, source, storage_offset, size, stride);
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::cpu::set_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &g_device_allocator,
                       /*resizable=*/true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

// Zero-copy replacement for the CPU fallback's "copy every argument to the
// host" step: device memory *is* host memory, so hand out aliases.  Mutations
// made by the CPU kernel land in device memory directly, and the fallback's
// copy-back becomes a detected no-op in copy_from().
std::vector<at::Tensor> to_cpu(at::TensorList tensors) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (const auto& t : tensors) {
    if (!t.defined()) {
      out.emplace_back();
    } else if (t.device().type() == kDevice) {
      out.push_back(host_alias(t));
    } else {
      out.push_back(t.cpu());
    }
  }
  return out;
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}

// ----------------------------------------------------- streams and events --

std::atomic<int64_t> g_next_stream_id{1};
std::atomic<uintptr_t> g_next_event_id{1};
thread_local std::array<c10::StreamId, kMaxDevices> t_current_stream{};

struct DeviceGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDevice; }

  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    if (device.index() >= 0 && device.index() != old.index()) setDevice(device);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kDevice, t_current_device);
  }
  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == kDevice, "expected an emulated device, got ",
                device);
    check_index(device.index());
    t_current_device = device.index();
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < g_device_count.load())
      t_current_device = device.index();
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return g_device_count.load();
  }

  c10::Stream getStream(c10::Device device) const override {
    const auto index = device.index() < 0 ? t_current_device : device.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDevice, index),
                       t_current_stream[index]);
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device device,
                                      bool /*high_priority*/) const override {
    return getNewStream(device, 0);
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, device, g_next_stream_id++);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    const auto index = stream.device_index();
    c10::Stream old = getStream(stream.device());
    t_current_stream[index] = stream.id();
    return old;
  }

  // Work is complete when an op returns, so events only need an identity.
  void record(void** event, const c10::Stream& /*stream*/,
              const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr) *event = reinterpret_cast<void*>(g_next_event_id++);
  }
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  void destroyEvent(void* /*event*/,
                    const c10::DeviceIndex /*device_index*/) const noexcept override {}
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {}
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/,
                             const c10::Stream& /*stream*/) const override {}
  double elapsedTime(void* /*start*/, void* /*end*/,
                     const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(false, "the emulated device has no timing events");
  }
};

// ------------------------------------------------------------------ hooks --

struct Hooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex /*index*/) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return g_device_count.load(); }
  void setCurrentDevice(c10::DeviceIndex index) const override {
    check_index(index);
    t_current_device = index;
  }
  c10::DeviceIndex getCurrentDevice() const override { return t_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const auto old = t_current_device;
    setCurrentDevice(index);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    return exchangeDevice(index);
  }
  at::Allocator* getPinnedMemoryAllocator() const override {
    return &g_pinned_allocator;
  }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    return g_pinned.count(data) != 0;
  }
  at::Device getDeviceFromPtr(void* /*data*/) const override {
    return at::Device(kDevice, t_current_device);
  }
  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex /*index*/) const override {
    return at::detail::getDefaultCPUGenerator();
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
    c10::DataPtr fresh = allocate_on(impl->device().index(), new_bytes);
    const size_t keep = std::min(new_bytes, impl->nbytes());
    if (keep) std::memcpy(fresh.get(), impl->data(), keep);
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
    g_hooks_registered = true;
  }
}

// IPC handle of the exportable allocation containing `ptr`:
// (pid, fd, offset of ptr in the allocation, allocation size).
std::tuple<int64_t, int64_t, int64_t, int64_t> ipc_export(int64_t ptr) {
  const auto address = static_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(g_mapping_mutex);
  auto it = g_mappings.upper_bound(address);
  const bool found = it != g_mappings.begin() && (--it, address < it->first + it->second.size);
  TORCH_CHECK(found && it->second.fd >= 0, "address ", ptr,
              " is not in exportable emulated device memory: only allocations of at least ",
              kShareableBytes, " bytes made by this process can be exported (allocate KV caches "
              "as whole tensors of at least that size)");
  const uintptr_t base = it->first;
  const Mapping& mapping = it->second;
  return {static_cast<int64_t>(getpid()), mapping.fd, static_cast<int64_t>(address - base),
          static_cast<int64_t>(mapping.size)};
}

// Map another process's exported allocation into this one as a uint8 device
// tensor of `size` bytes; unmapped when the last tensor using it dies.
at::Tensor ipc_open(int64_t pid, int64_t fd, int64_t size, int64_t index) {
  check_index(static_cast<c10::DeviceIndex>(index));
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int local_fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  TORCH_CHECK(local_fd >= 0, "cannot open emulated IPC handle ", path, ": ", std::strerror(errno),
              " (the exporting process must be alive and the memory still allocated)");
  void* ptr = nullptr;
  try {
    ptr = map_shared(local_fd, static_cast<size_t>(size));
  } catch (...) {
    close(local_fd);
    throw;
  }
  close(local_fd);  // the mapping keeps the memory alive
  {
    std::lock_guard<std::mutex> lock(g_mapping_mutex);
    g_mappings[reinterpret_cast<uintptr_t>(ptr)] = Mapping{-1, static_cast<size_t>(size)};
  }
  const c10::Device device(kDevice, static_cast<c10::DeviceIndex>(index));
  c10::DataPtr data(ptr, ptr, &free_device_memory, device);
  c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(size), std::move(data),
                       /*allocator=*/nullptr, /*resizable=*/false);
  c10::DeviceGuard guard(device);
  return at::empty({0}, at::TensorOptions().dtype(at::kByte).device(device)).set_(storage, 0, {size}, {1});
}

int64_t live_shared_mappings() {
  std::lock_guard<std::mutex> lock(g_mapping_mutex);
  return static_cast<int64_t>(g_mappings.size());
}

int64_t current_device() { return t_current_device; }
void set_device(int64_t index) {
  check_index(static_cast<c10::DeviceIndex>(index));
  t_current_device = static_cast<c10::DeviceIndex>(index);
}
int64_t device_count() { return g_device_count.load(); }

}  // namespace

REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &g_device_allocator);
C10_REGISTER_GUARD_IMPL(PrivateUse1, DeviceGuard);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_to_cpu", TORCH_FN(to_cpu));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Host-memory PrivateUse1 device (test and CI tool).";
  m.def("register_hooks", &register_hooks, "Make PrivateUse1 an accelerator with N devices.");
  m.def("current_device", &current_device);
  m.def("set_device", &set_device);
  m.def("device_count", &device_count);
  m.def("ipc_export", &ipc_export, "(pid, fd, offset, size) of the exportable allocation at an address.");
  m.def("ipc_open", &ipc_open, "Map an exported allocation: (pid, fd, size, device index) -> uint8 tensor.");
  m.def("live_shared_mappings", &live_shared_mappings, "Shared allocations and imports alive in this process.");
  m.def("empty_cache", &empty_cache, "Release the cached, currently unused shareable allocations.");
}
