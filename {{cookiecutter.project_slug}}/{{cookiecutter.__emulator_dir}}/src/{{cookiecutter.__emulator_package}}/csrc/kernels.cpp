// SPDX-License-Identifier: Apache-2.0
//
// What a device runs for native code, with a runtime's rules: kernels
// (emulator_launch, a runtime's cudaLaunchKernel) and async copies by the copy
// engine (emulator_memcpy_async, cudaMemcpyAsync, aclrtMemcpyAsync).  Both run
// on the stream's worker (streams.cpp), after the work queued before them.
//
// Why a kernel gets a copy of a bounded parameter block: a device kernel
// cannot read the host's heap, and a runtime copies a launch's arguments
// (at most kMaxParamBytes; CUDA's classic limit) when the launch is made.  A
// kernel handed a pointer to host structures, or arguments freed once the
// launch returns, works on a CPU and fails on a device.  Here the caller's
// block is poisoned when the launch returns, and the kernel's addresses go
// through the translator (faults.cpp), which refuses host memory the device
// cannot reach: tables a kernel reads live in device memory.
//
// Why async copies read host memory only when it is pinned: a copy engine
// reads host memory by DMA, later, and only memory pinned for it (a pageable
// source is staged and copied synchronously by CUDA's runtime, refused by
// others); one given pageable memory fails its stream here.

#include "emulator.h"

#include <torch/csrc/utils/pybind.h>

#include <cstring>
#include <vector>

namespace emulator {
namespace {

// The largest parameter block a launch takes, and what fills the caller's
// once the launch returns.
constexpr int64_t kMaxParamBytes = 4096;
constexpr unsigned char kPoison = 0xA5;
// cudaMemcpyKind's numbering.
constexpr int64_t kHostToDevice = 1, kDeviceToHost = 2;

}  // namespace
}  // namespace emulator

// The kernel launch native code calls (a runtime's cudaLaunchKernel):
// `kernel(copy)` runs on the stream's worker after the work queued before it,
// `copy` being the launch's copy of `params_bytes` at `params` (at most
// kMaxParamBytes).  Returns 0; -1 for a handle that names no stream, -2 for a
// parameter block larger than a launch takes.
extern "C" int emulator_launch(int64_t stream, void (*kernel)(const void*),
                               void* params, int64_t params_bytes) {
  if (params_bytes < 0 || params_bytes > emulator::kMaxParamBytes) return -2;
  try {
    emulator::Worker* worker = emulator::worker_of_handle(stream);
    const c10::DeviceIndex device = emulator::worker_device(worker);
    const char* bytes = static_cast<const char*>(params);
    std::vector<char> copy(bytes, bytes + params_bytes);
    emulator::enqueue(worker, [kernel, copy = std::move(copy), device] {
      if (emulator::take_transfer_fault()) {  // device_lost: the kernel never
                                              // runs, the device is gone
        emulator::lose_device(device);
      }
      emulator::kernel_starts();
      kernel(copy.data());
    });
    emulator::count(emulator::kLaunches);
    if (params_bytes > 0) std::memset(params, emulator::kPoison, params_bytes);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// The async copy native code calls (cudaMemcpyAsync): `nbytes` from `src` to
// `dst` on `stream`, host memory given at its host address, device memory of
// the stream's device.  The ends are checked when the copy runs; a failing one
// fails the stream.  `kind`: 1 host to device, 2 device to host.  Returns 0,
// or -1 for a handle that names no stream or another kind.
extern "C" int emulator_memcpy_async(int64_t dst, int64_t src, int64_t nbytes,
                                     int64_t kind, int64_t stream) {
  if (nbytes < 0 ||
      (kind != emulator::kHostToDevice && kind != emulator::kDeviceToHost))
    return -1;
  try {
    emulator::Worker* worker = emulator::worker_of_handle(stream);
    const c10::DeviceIndex device = emulator::worker_device(worker);
    emulator::enqueue(worker, [dst, src, nbytes, kind, device] {
      const bool to_device = kind == emulator::kHostToDevice;
      const int64_t host = to_device ? src : dst;
      TORCH_CHECK(emulator::host_is_pinned(host, nbytes),
                  "an async copy was given 0x", std::hex, host, std::dec, " (",
                  nbytes,
                  " bytes) of pageable host memory: a copy engine reads "
                  "pinned host memory only; copy pageable memory "
                  "synchronously");
      char* on_device = emulator::host_view(
          reinterpret_cast<const void*>(to_device ? dst : src),
          static_cast<size_t>(nbytes), device);
      char* on_host = reinterpret_cast<char*>(host);
      std::memcpy(to_device ? on_device : on_host,
                  to_device ? on_host : on_device, static_cast<size_t>(nbytes));
      emulator::count_copy(/*from_host=*/to_device, /*to_host=*/!to_device,
                           static_cast<uint64_t>(nbytes));
      emulator::count(emulator::kCopies);
    });
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

namespace emulator {
void bind_kernels(pybind11::module& m) {
  m.def("kernel_launcher",
        [] { return reinterpret_cast<int64_t>(&emulator_launch); });
  m.def("memcpy_async_launcher",
        [] { return reinterpret_cast<int64_t>(&emulator_memcpy_async); });
  m.def("max_param_bytes", [] { return kMaxParamBytes; });
}
}  // namespace emulator
