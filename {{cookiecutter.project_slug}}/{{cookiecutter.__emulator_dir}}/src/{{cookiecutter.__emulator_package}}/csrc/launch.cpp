// SPDX-License-Identifier: Apache-2.0
//
// Host functions native code launches on a stream, with a runtime's rules
// (emulator_launch_host_func, a runtime's cudaLaunchHostFunc: a C function
// pointer and its argument, never a Python callable), run after the work
// queued before them (kernels and async copies: kernels.cpp).
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
// Runtimes differ in how a host function reaches a host thread (the model,
// set_host_function_model): "launch" runs it on the stream's worker (CUDA);
// "subscribed" runs it only on a host thread subscribed to its stream
// (emulator_subscribe_report, Ascend's aclrtSubscribeReport) while that thread
// processes reports (emulator_process_report, aclrtProcessReport), and the
// stream waits for it (ACL_CALLBACK_BLOCK).  One no thread takes never runs: a
// stream wait reports it after a second instead of hanging.
//
// hold_stream is a test facility no runtime has (CUDA's nearest is
// torch.cuda._sleep): a stream held until released, so tests order work
// deterministically.

#include "emulator.h"

#include <torch/csrc/utils/pybind.h>

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>

namespace emulator {
namespace {

using Clock = std::chrono::steady_clock;

struct HostFunctions {
  int pending = 0;                 // queued on the stream, not returned yet
  Clock::time_point running = {};  // since when the current one runs, if any
  Clock::time_point unprocessed = {};  // since when one waits for a thread
};
std::mutex g_host_mutex;
std::map<Worker*, HostFunctions> g_host_functions;

// The subscribed model's state: who processes each stream's callbacks, and
// what each thread has to process.
struct Report {
  Worker* worker;
  void (*fn)(void*);
  void* data;
  bool done = false;
};
struct Reports {
  std::mutex mutex;
  std::condition_variable changed;
  std::map<Worker*, uint64_t> subscriber;           // stream -> thread
  std::map<uint64_t, std::deque<Report*>> pending;  // thread -> callbacks
};
std::atomic<bool> g_subscribed{false};
Reports* g_reports = new Reports();  // never freed: stream workers outlive exit
// A child of fork has none of its parent's threads, so no subscriber either.
void forget_reports_in_child() { g_reports = new Reports(); }

void set_host_times(Worker* worker, bool running, bool unprocessed) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  const Clock::time_point now = Clock::now();
  g_host_functions[worker].running = running ? now : Clock::time_point{};
  g_host_functions[worker].unprocessed =
      unprocessed ? now : Clock::time_point{};
}

// On the stream's worker: hand the callback to the thread subscribed to the
// stream, once one is, and wait until it has run.
void run_on_subscriber(Worker* worker, void (*fn)(void*), void* data) {
  Reports& reports = *g_reports;
  Report report{worker, fn, data};
  set_host_times(worker, false, true);
  std::unique_lock<std::mutex> lock(reports.mutex);
  reports.changed.wait(lock, [&] { return reports.subscriber.count(worker); });
  reports.pending[reports.subscriber[worker]].push_back(&report);
  reports.changed.notify_all();
  reports.changed.wait(lock, [&] { return report.done; });
}

uint64_t this_thread() { return static_cast<uint64_t>(pthread_self()); }

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

double host_function_running_for(Worker* worker, bool unprocessed) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  auto found = g_host_functions.find(worker);
  if (found == g_host_functions.end()) return 0;
  const Clock::time_point since =
      unprocessed ? found->second.unprocessed : found->second.running;
  if (since == Clock::time_point{}) return 0;
  return std::chrono::duration<double>(Clock::now() - since).count();
}

void set_host_function_model(const std::string& model) {
  TORCH_CHECK(model == "launch" || model == "subscribed",
              "unknown host-function model '", model,
              "': launch or subscribed");
  static const bool at_fork =
      (pthread_atfork(nullptr, nullptr, &forget_reports_in_child), true);
  (void)at_fork;
  g_subscribed = model == "subscribed";
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
          if (emulator::stream_failed()) {
            // dropped, as a runtime drops it
          } else if (emulator::g_subscribed) {
            emulator::run_on_subscriber(worker, fn, data);
          } else {
            emulator::set_host_times(worker, true, false);
            fn(data);
          }
          emulator::set_host_times(worker, false, false);
          std::lock_guard<std::mutex> lock(g_host_mutex);
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

// aclrtSubscribeReport: `thread` processes the callbacks of `stream` (one
// thread per stream).  Returns 0, or -1 for a stream another thread has.
extern "C" int emulator_subscribe_report(uint64_t thread, int64_t stream) {
  try {
    emulator::Worker* worker = emulator::worker_of_handle(stream);
    emulator::Reports& reports = *emulator::g_reports;
    std::lock_guard<std::mutex> lock(reports.mutex);
    auto [found, added] = reports.subscriber.emplace(worker, thread);
    if (!added && found->second != thread) return -1;
    reports.changed.notify_all();
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}
// aclrtProcessReport: run one callback of a stream the calling thread
// subscribed to, waiting at most `timeout_ms` (-1: forever) for one.  Returns
// 0, or 1 when none came.
extern "C" int emulator_process_report(int32_t timeout_ms) {
  emulator::Reports& reports = *emulator::g_reports;
  std::unique_lock<std::mutex> lock(reports.mutex);
  std::deque<emulator::Report*>& mine =
      reports.pending[emulator::this_thread()];
  auto any = [&] { return !mine.empty(); };
  if (timeout_ms < 0) {
    reports.changed.wait(lock, any);
  } else if (!reports.changed.wait_for(
                 lock, std::chrono::milliseconds(timeout_ms), any)) {
    return 1;
  }
  emulator::Report* report = mine.front();
  mine.pop_front();
  lock.unlock();
  emulator::set_host_times(report->worker, true, false);
  report->fn(report->data);
  lock.lock();
  report->done = true;
  reports.changed.notify_all();
  return 0;
}

namespace emulator {
void bind_launches(pybind11::module& m) {
  m.def("set_host_function_model", &set_host_function_model,
        "launch (CUDA) or subscribed (Ascend): how host functions run.");
  m.def("report_subscriber",
        [] { return reinterpret_cast<int64_t>(&emulator_subscribe_report); });
  m.def("report_processor",
        [] { return reinterpret_cast<int64_t>(&emulator_process_report); });
  m.def("host_func_launcher",
        [] { return reinterpret_cast<int64_t>(&emulator_launch_host_func); });
  m.def("hold_stream", &hold_stream,
        "Hold a stream until release_hold, at most `seconds` (tests only).");
  m.def("release_hold", &release_hold, "Release a hold; true if it expired.");
}
}  // namespace emulator
