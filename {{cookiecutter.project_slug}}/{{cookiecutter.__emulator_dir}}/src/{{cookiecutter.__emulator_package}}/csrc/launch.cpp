// SPDX-License-Identifier: Apache-2.0
//
// What native code launches on a stream, with a runtime's rules: kernels
// (emulator_launch, a runtime's cudaLaunchKernel) and host functions
// (emulator_launch_host_func, a runtime's cudaLaunchHostFunc: a C function
// pointer and its argument, never a Python callable).  Both run on the
// stream's worker (streams.cpp), after the work queued before them.
//
// Why host functions take only C pointers here: no vendor runtime runs Python
// on a stream, and a host function that takes the GIL can deadlock against a
// host thread that holds the GIL while it waits on the same stream, which a
// vendor's bindings need not release.  So a stream wait here keeps the GIL
// while a host function is queued on the stream (streams.cpp: wait_ticket),
// and one that has run for a second by then is reported as that deadlock
// instead of hanging.  LMCache's CUDA recorder
// (csrc/cuda/completion_recorder.cpp) is the pattern that passes: its host
// function pushes into a C++ buffer that Python drains.
//
// hold_stream is a test facility no runtime has (CUDA's nearest is
// torch.cuda._sleep): a stream held until released, so tests order work
// deterministically.

#include "emulator.h"

#include <torch/csrc/utils/pybind.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

namespace emulator {
namespace {

using Clock = std::chrono::steady_clock;

struct HostFunctions {
  int pending = 0;                 // queued on the stream, not returned yet
  Clock::time_point running = {};  // since when the current one runs, if any
};
std::mutex g_host_mutex;
std::map<Worker*, HostFunctions> g_host_functions;

struct Hold {
  std::mutex mutex;
  std::condition_variable changed;
  bool released = false, expired = false;
};
std::mutex g_holds_mutex;
std::map<int64_t, std::shared_ptr<Hold>> g_holds;
int64_t g_next_hold = 1;

}  // namespace

int pending_host_functions(Worker* worker) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto found = g_host_functions.find(worker);
  return found == g_host_functions.end() ? 0 : found->second.pending;
}

double host_function_running_for(Worker* worker) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto found = g_host_functions.find(worker);
  if (found == g_host_functions.end() ||
      found->second.running == Clock::time_point{})
    return 0;
  return std::chrono::duration<double>(Clock::now() - found->second.running)
      .count();
}

// Hold `handle`'s stream: work queued behind the hold waits until release, or
// until `seconds` have passed (the hold expires).  Returns the hold's id.
int64_t hold_stream(int64_t handle, double seconds) {
  Worker* worker = worker_of_handle(handle);
  auto hold = std::make_shared<Hold>();
  int64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(g_holds_mutex);
    id = g_next_hold++;
    g_holds[id] = hold;
  }
  enqueue(worker, [hold, seconds] {
    std::unique_lock<std::mutex> lock(hold->mutex);
    hold->expired =
        !hold->changed.wait_for(lock, std::chrono::duration<double>(seconds),
                                [&] { return hold->released; });
  });
  return id;
}

// Release a hold; true if it had expired first (its stream ran on already).
bool release_hold(int64_t id) {
  std::shared_ptr<Hold> hold;
  {
    std::lock_guard<std::mutex> lock(g_holds_mutex);
    auto found = g_holds.find(id);
    TORCH_CHECK(found != g_holds.end(), "no stream hold ", id);
    hold = found->second;
    g_holds.erase(found);
  }
  std::lock_guard<std::mutex> lock(hold->mutex);
  hold->released = true;
  hold->changed.notify_all();
  return hold->expired;
}

}  // namespace emulator

// The kernel launch native code calls (a runtime's cudaLaunchKernel):
// `kernel(args)` runs on the stream's worker, after the work queued before it.
// `kernel` owns `args`.  Returns 0, or -1 for a handle that names no stream.
extern "C" int emulator_launch(int64_t stream, void (*kernel)(void*),
                               void* args) {
  try {
    emulator::Worker* worker = emulator::worker_of_handle(stream);
    const c10::DeviceIndex device = emulator::worker_device(worker);
    emulator::enqueue(worker, [kernel, args, device] {
      if (emulator::take_transfer_fault()) {  // device_lost: the kernel never
                                              // runs, the device is gone
        emulator::lose_device(device);
      }
      emulator::kernel_starts();
      kernel(args);
    });
    emulator::count(emulator::kLaunches);
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// The host-function launch native code calls (a runtime's cudaLaunchHostFunc):
// `fn(data)` runs on the stream's worker once the work queued before it is
// done, without the GIL; on a failed stream it is dropped, as a runtime drops
// it.  As with CUDA, it must not call the runtime.  Returns 0, or -1 for a
// handle that names no stream.
extern "C" int emulator_launch_host_func(int64_t stream, void (*fn)(void*),
                                         void* data) {
  using emulator::g_host_functions;
  using emulator::g_host_mutex;
  emulator::Worker* worker = nullptr;
  try {
    worker = emulator::worker_of_handle(stream);
  } catch (const std::exception&) {
    return -1;
  }
  {
    std::lock_guard<std::mutex> lock(g_host_mutex);
    ++g_host_functions[worker].pending;
  }
  try {
    emulator::enqueue(
        worker,
        [worker, fn, data] {
          const bool runs = !emulator::stream_failed();
          if (runs) {
            std::lock_guard<std::mutex> lock(g_host_mutex);
            g_host_functions[worker].running = emulator::Clock::now();
          }
          if (runs) fn(data);
          std::lock_guard<std::mutex> lock(g_host_mutex);
          g_host_functions[worker].running = {};
          --g_host_functions[worker].pending;
        },
        /*always=*/true);
    emulator::count(emulator::kHostFunctions);
    return 0;
  } catch (const std::exception&) {  // a lost device: nothing was queued
    std::lock_guard<std::mutex> lock(g_host_mutex);
    --g_host_functions[worker].pending;
    return -1;
  }
}

namespace emulator {
void bind_launches(pybind11::module& m) {
  m.def("kernel_launcher",
        [] { return reinterpret_cast<int64_t>(&emulator_launch); });
  m.def("host_func_launcher",
        [] { return reinterpret_cast<int64_t>(&emulator_launch_host_func); });
  m.def("hold_stream", &hold_stream,
        "Hold a stream until release_hold, at most `seconds` (tests only).");
  m.def("release_hold", &release_hold, "Release a hold; true if it expired.");
}
}  // namespace emulator
