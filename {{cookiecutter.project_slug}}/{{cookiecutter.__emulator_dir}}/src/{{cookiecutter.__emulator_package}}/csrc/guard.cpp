// SPDX-License-Identifier: Apache-2.0
//
// torch's view of the emulated device: its device guard.
//
// Why it exists: torch reaches a PrivateUse1 device's current device and
// stream, its events and its synchronization through one registered
// DeviceGuardImplInterface; torch.Stream, torch.Event, torch.<device>.stream()
// and every stream-aware op go through it.  Here each call maps onto the
// emulator's streams (streams.cpp) and events (events.cpp); nothing more.
// The current stream is per thread and device, as on CUDA.

#include "emulator.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <array>
#include <atomic>

namespace emulator {

namespace {

thread_local std::array<c10::StreamId, kMaxDevices> t_current_stream{};
std::atomic<c10::StreamId> g_next_stream_id{1};
thread_local bool t_context_bound = false;

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
    set_current_device(device.index());
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    if (device.index() >= 0 && device.index() < g_device_count.load())
      set_current_device(device.index());
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
  c10::Stream getNewStream(c10::Device device,
                           int /*priority*/) const override {
    return c10::Stream(c10::Stream::UNSAFE, device, g_next_stream_id++);
  }
  c10::Stream exchangeStream(c10::Stream stream) const override {
    c10::Stream old = getStream(stream.device());
    t_current_stream[stream.device_index()] = stream.id();
    return old;
  }
  void record(void** event, const c10::Stream& stream,
              const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {
    if (*event == nullptr)
      *event = reinterpret_cast<void*>(event_create(false));
    event_record(reinterpret_cast<int64_t>(*event),
                 worker_for(stream.device_index(), stream.id()));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event)
      event_block(reinterpret_cast<int64_t>(event),
                  worker_for(stream.device_index(), stream.id()));
  }
  bool queryEvent(void* event) const override {
    return !event || event_query(reinterpret_cast<int64_t>(event));
  }
  void destroyEvent(void* event, const c10::DeviceIndex /*device_index*/)
      const noexcept override {
    if (event) event_destroy(reinterpret_cast<int64_t>(event));
  }
  bool queryStream(const c10::Stream& stream) const override {
    return query_worker(worker_for(stream.device_index(), stream.id()));
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    host_synchronize(worker_for(stream.device_index(), stream.id()));
  }
  void synchronizeEvent(void* event) const override {
    if (event) event_synchronize(reinterpret_cast<int64_t>(event));
  }
  void synchronizeDevice(const c10::DeviceIndex device_index) const override {
    synchronize_device(device_index);
  }
  void recordDataPtrOnStream(const c10::DataPtr& /*data_ptr*/,
                             const c10::Stream& /*stream*/) const override {}
  double elapsedTime(void* /*start*/, void* /*end*/,
                     const c10::DeviceIndex /*device_index*/) const override {
    TORCH_CHECK(false, "the emulated device has no timing events");
  }
};

}  // namespace

// Runtime contexts are per thread, as on Ascend (ACL): a thread binds one by
// setting its device (aclrtSetDevice); CUDA's runtime makes its primary context
// current by itself.  With contexts required (the default), the runtime calls
// that need one (host registration, IPC export, open and close) fail on a
// thread that bound none, as ACL's fail (107002): the thread that loaded the
// emulator is bound, as torch_npu binds the one that initializes it.
std::atomic<bool> g_require_contexts{true};

void set_current_device(c10::DeviceIndex index) {
  t_current_device = index;
  t_context_bound = true;
}

void check_context(const char* call) {
  TORCH_CHECK(!g_require_contexts.load() || t_context_bound, call,
              ": no device context is bound on this thread; a runtime with "
              "per-thread contexts (Ascend's) fails this call. Set the device "
              "on the thread first (torch.<device>.set_device(index)), once "
              "per thread, before its first runtime call");
}

Worker* current_worker(c10::DeviceIndex device) {
  return worker_for(device, t_current_stream[device]);
}

}  // namespace emulator

C10_REGISTER_GUARD_IMPL(PrivateUse1, emulator::DeviceGuard);
