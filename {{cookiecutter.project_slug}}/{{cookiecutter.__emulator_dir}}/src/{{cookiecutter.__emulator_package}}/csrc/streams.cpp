// SPDX-License-Identifier: Apache-2.0
//
// Asynchronous streams for the emulated device, with CUDA's rules.
//
// Why it exists: on a device, work queued on a stream runs later.  A plugin
// that publishes a completion, reads a buffer or frees memory before the work
// queued ahead of it has finished passes on a synchronous emulator and fails
// on hardware.  Here every stream has its own worker thread; a task runs in
// order, no earlier than a latency (default 200 us) after it was enqueued, so
// such a missing wait reads stale bytes here too.
//   * stream waits, queries and host synchronization follow CUDA (events are
//     in events.cpp, torch's device guard in guard.cpp);
//   * host functions and kernels (launch.cpp: C entry points native code
//     calls instead of a runtime's launches) run on the stream's worker; a
//     failing task poisons its stream, and the next
//     synchronization raises its error (CUDA's sticky errors).  Work queued
//     behind it is dropped; events recorded behind it fail, and so do their
//     waiters, here and in the processes that imported them (no hang).  A lost
//     device (faults.cpp) poisons every stream of it.
// Host waits release the GIL, except behind a host function (launch.cpp says
// why); a task that waits on its own stream is refused.

#include "emulator.h"

// pybind11 with torch's type casters, for the GIL and the bindings.
// <torch/extension.h> would parse libtorch's whole C++ API too: the emulator
// compiled in 114 s of CPU with it, 65 without.
#include <torch/csrc/utils/pybind.h>

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace emulator {

// ----------------------------------------------------------------- workers --

struct Task {
  std::chrono::steady_clock::time_point ready;
  std::function<void()> run;
  bool always;  // runs on a failed stream too (stream_failed() says so): event
                // records, host-function clean-up
};

struct Worker {
  c10::DeviceIndex device;
  c10::StreamId id;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Task> queue;
  uint64_t enqueued = 0, completed = 0;
  std::string failure;  // the first task that failed (sticky)
  bool started = false;
};

namespace {

std::atomic<int64_t> g_latency_us{200};
std::mutex g_workers_mutex;
std::map<std::pair<c10::DeviceIndex, c10::StreamId>, Worker*>
    g_workers;                            // never freed: threads outlive exit
thread_local Worker* t_worker = nullptr;  // the worker this thread runs
thread_local bool t_stream_failed =
    false;  // an `always` task runs on a failed stream

void run(Worker* worker) {
  t_worker = worker;
  // Named, so that a process's CPU time can be told from the emulated
  // device's work (the benchmark's per-chunk CPU time leaves them out).
  pthread_setname_np(pthread_self(), "emulated-stream");
  std::unique_lock<std::mutex> lock(worker->mutex);
  for (;;) {
    worker->changed.wait(lock, [&] { return !worker->queue.empty(); });
    Task task = std::move(worker->queue.front());
    worker->queue.pop_front();
    if (worker->failure.empty() && device_lost(worker->device))
      worker->failure = lost_message(worker->device);
    const bool poisoned = !worker->failure.empty();
    lock.unlock();
    std::this_thread::sleep_until(task.ready);
    std::string error;
    if (!poisoned || task.always) {
      t_stream_failed = poisoned;
      try {
        task.run();
      } catch (const std::exception& exc) {
        error = exc.what();
      }
    }
    task.run =
        nullptr;  // drop what the task held (tensors) before it counts as done
    lock.lock();
    if (!error.empty() && worker->failure.empty()) worker->failure = error;
    ++worker->completed;
    worker->changed.notify_all();
  }
}

// Fork keeps the parent's workers' state but not their threads: the child
// starts its own.
void forget_workers_in_child() {
  new (&g_workers_mutex) std::mutex();
  new (&g_workers) decltype(g_workers)();
}

}  // namespace

// Run `wait` without the GIL when the caller holds it: a stream task may need
// it.
void without_gil(const std::function<void()>& wait) {
  if (Py_IsInitialized() && PyGILState_Check()) {
    pybind11::gil_scoped_release no_gil;
    wait();
  } else {
    wait();
  }
}

void set_latency_us(int64_t latency_us) { g_latency_us = latency_us; }

Worker* worker_for(c10::DeviceIndex device, c10::StreamId id) {
  check_index(device);
  static const bool at_fork =
      (pthread_atfork(nullptr, nullptr, &forget_workers_in_child), true);
  (void)at_fork;
  std::lock_guard<std::mutex> lock(g_workers_mutex);
  Worker*& worker = g_workers[{device, id}];
  if (worker == nullptr) {
    worker = new Worker();
    worker->device = device;
    worker->id = id;
  }
  return worker;
}

uint64_t enqueue(Worker* worker, std::function<void()> task, bool always) {
  check_device(worker->device);
  const auto ready = std::chrono::steady_clock::now() +
                     std::chrono::microseconds(g_latency_us.load());
  std::lock_guard<std::mutex> lock(worker->mutex);
  if (!worker->started) {
    std::thread(run, worker).detach();
    worker->started = true;
  }
  worker->queue.push_back(Task{ready, std::move(task), always});
  worker->changed.notify_all();
  return ++worker->enqueued;
}

bool stream_failed() { return t_stream_failed; }

c10::DeviceIndex running_device() {
  return t_worker == nullptr ? c10::DeviceIndex(-1) : t_worker->device;
}

void wait_ticket(Worker* worker, uint64_t ticket) {
  TORCH_CHECK(worker != t_worker,
              "work on an emulated stream (a host function or kernel) waited "
              "for its own ",
              "stream: host functions must not call the device runtime (as "
              "with cudaLaunchHostFunc)");
  std::string failure;
  auto done = [&] { return worker->completed >= ticket; };
  const bool gil = Py_IsInitialized() && PyGILState_Check();
  if (pending_host_functions(worker) > 0) {
    // Keep the GIL, as a runtime's binding may (launch.cpp): a host function
    // that takes it never returns, and one that no subscribed thread takes
    // never runs; each is reported rather than hung on.
    std::unique_lock<std::mutex> lock(worker->mutex);
    while (
        !worker->changed.wait_for(lock, std::chrono::milliseconds(20), done)) {
      TORCH_CHECK(
          host_function_running_for(worker, true) <
              kHostFunctionDeadlockSeconds,
          "hang: a host function on emulated stream ", worker->id, " of ",
          c10::Device(kDevice, worker->device), " has waited ",
          kHostFunctionDeadlockSeconds,
          " s for a host thread to run it. On this runtime (Ascend's model) "
          "a callback runs only on a thread subscribed to its stream "
          "(aclrtSubscribeReport) that processes reports in a loop "
          "(aclrtProcessReport): subscribe one per stream before launching "
          "(runtime.py's host_function_model 'subscribed', _recorders.cpp)");
      TORCH_CHECK(
          !gil ||
              host_function_running_for(worker) < kHostFunctionDeadlockSeconds,
          "deadlock: this thread holds the GIL while it waits for emulated "
          "stream ",
          worker->id, " of ", c10::Device(kDevice, worker->device),
          ", and a host function on that stream has not returned for ",
          kHostFunctionDeadlockSeconds,
          " s: it takes the GIL (a Python callable run through a C pointer?). "
          "A runtime's binding need not release the GIL while it waits, so "
          "host functions must not run Python: record in C++ and drain from "
          "Python, as LMCache's csrc/cuda/completion_recorder.cpp does");
    }
    failure = worker->failure;
  } else {
    without_gil([&] {
      std::unique_lock<std::mutex> lock(worker->mutex);
      worker->changed.wait(lock, done);
      failure = worker->failure;
    });
  }
  TORCH_CHECK(failure.empty(), "work on emulated stream ", worker->id, " of ",
              c10::Device(kDevice, worker->device), " failed: ", failure);
  check_device(worker->device);
}

void synchronize_worker(Worker* worker) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(worker->mutex);
    ticket = worker->enqueued;
  }
  wait_ticket(worker, ticket);
}

void host_synchronize(Worker* worker) {
  count(kHostSyncs);
  synchronize_worker(worker);
}

void clear_stream_failures() {
  std::lock_guard<std::mutex> lock(g_workers_mutex);
  for (const auto& [key, worker] : g_workers) {
    std::lock_guard<std::mutex> worker_lock(worker->mutex);
    worker->failure.clear();
  }
}

void synchronize_device(c10::DeviceIndex device) {
  std::vector<Worker*> workers;
  {
    std::lock_guard<std::mutex> lock(g_workers_mutex);
    for (const auto& [key, worker] : g_workers) {
      if (key.first == device) workers.push_back(worker);
    }
  }
  count(kHostSyncs);  // one, however many streams it waits for
  for (Worker* worker : workers) synchronize_worker(worker);
}

c10::DeviceIndex worker_device(Worker* worker) { return worker->device; }

bool worker_idle(Worker* worker) {
  std::lock_guard<std::mutex> lock(worker->mutex);
  return worker->completed == worker->enqueued;
}

bool query_worker(Worker* worker) {
  count(kQueries);
  std::lock_guard<std::mutex> lock(worker->mutex);
  return worker->completed == worker->enqueued;
}

// A stream's native handle (never 0): what a runtime calls a stream pointer.
int64_t stream_handle(int64_t device, int64_t id) {
  return ((id + 1) << 6) | device;
}
Worker* worker_of_handle(int64_t handle) {
  TORCH_CHECK(handle > 0, "0x", std::hex, handle, std::dec,
              " is not an emulated stream handle");
  return worker_for(static_cast<c10::DeviceIndex>(handle & 63),
                    (handle >> 6) - 1);
}

}  // namespace emulator

namespace emulator {
void bind_launches(pybind11::module& m);  // launch.cpp
void bind_kernels(pybind11::module& m);   // kernels.cpp
}  // namespace emulator

void bind_streams(pybind11::module& m) {
  using namespace emulator;
  m.def("set_latency_us", &set_latency_us,
        "Microseconds a stream task waits before it may run.");
  m.def(
      "require_thread_contexts", [](bool on) { g_require_contexts = on; },
      "Whether runtime calls need a context bound on the calling thread.");
  m.def("stream_handle", &stream_handle,
        "The native handle of stream (device, id).");
  m.def("synchronize_handle",
        [](int64_t handle) { host_synchronize(worker_of_handle(handle)); });
  m.def("synchronize_device", [](int64_t device) {
    synchronize_device(static_cast<c10::DeviceIndex>(device));
  });
  bind_launches(m);
  bind_kernels(m);
}
