// SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("// " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}//
// Completions and observability events published after a stream's queued work,
// recorded by a host function that never runs Python (compiled into _kernels;
// bound through native_ops.py).
//
// Why: an LMCache-driven server commits a store ("finish_write") and records
// its events only once the device copies queued before them have run. As
// LMCache's CUDA backend does (csrc/cuda/completion_recorder.cpp,
// event_recorder.cpp), the host function launched on the stream pushes into a
// C++ buffer and returns; LMCache drains the buffers from Python
// (drain_recorded_completions, drain_recorded_events). A host function that
// took the GIL could deadlock against a thread that holds it while it waits on
// the same stream, which a runtime's bindings need not release.
{%- if cookiecutter.lmcache_driven != 'no' %}
// TODO(vendor): the launcher is your runtime's host-function launch
// (cudaLaunchHostFunc; aclrtLaunchCallback on Ascend), passed from native_ops.py.
// A runtime without one keeps the synchronizing path (runtime.py). On Ascend a
// callback runs only on a thread subscribed to its stream that processes
// reports (aclrtSubscribeReport, aclrtProcessReport): subscribe_reports gives
// each stream one (runtime.py's model "subscribed").
{%- else %}
// An engine-driven-only plugin binds none of them: they serve LMCache-driven
// transfer, which it does not offer.
{%- endif %}

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pthread.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

// A runtime's host-function launch: fn(data) runs once the work queued on
// `stream` before it is done. Returns 0 on success.
using LaunchHostFunc = int (*)(int64_t stream, void (*fn)(void*), void* data);

struct Completion {
  std::string kind, payload;
};

struct Event {
  std::string type, session;
  double timestamp;
  std::map<std::string, std::string> strs;
  std::map<std::string, int64_t> ints;
};

template <typename T>
class Buffer {
 public:
  void push(T item) {
    std::lock_guard<std::mutex> lock(mutex_);
    items_.push_back(std::move(item));
  }
  std::vector<T> drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<T> out;
    out.swap(items_);
    return out;
  }

 private:
  std::mutex mutex_;
  std::vector<T> items_;
};

Buffer<Completion> g_completions;
Buffer<Event> g_events;

// Unix-epoch seconds that never go backwards (LMCache's
// lmcache_wall_clock_time: a clock slewed back would give spans that end
// before they start).
double wall_clock_time() {
  static const auto epoch_sys = std::chrono::system_clock::now();
  static const auto epoch_steady = std::chrono::steady_clock::now();
  const auto since = epoch_sys.time_since_epoch() + (std::chrono::steady_clock::now() - epoch_steady);
  return std::chrono::duration<double>(since).count();
}

// The host functions: no GIL, no runtime call.
void completion_done(void* raw) {
  std::unique_ptr<Completion> completion(static_cast<Completion*>(raw));
  g_completions.push(std::move(*completion));
}

void event_done(void* raw) {
  std::unique_ptr<Event> event(static_cast<Event*>(raw));
  event->timestamp = wall_clock_time();
  g_events.push(std::move(*event));
}

// Hands `item` to a host function on `stream`; the host function owns it.
template <typename T>
void launch(int64_t launcher, int64_t stream, void (*done)(void*), std::unique_ptr<T> item) {
  if (launcher == 0) throw std::invalid_argument("no host-function launcher given");
  T* raw = item.release();
  if (reinterpret_cast<LaunchHostFunc>(launcher)(stream, done, raw) != 0) {
    delete raw;  // never queued: nothing will publish it, so say so
    throw std::runtime_error("launching a host function on stream " + std::to_string(stream) +
                             " failed (a lost device, or not a stream of this device?)");
  }
}

void record_completion(int64_t launcher, int64_t stream, std::string kind, std::string payload) {
  launch(launcher, stream, &completion_done, std::make_unique<Completion>(Completion{std::move(kind), std::move(payload)}));
}

void record_event(int64_t launcher, int64_t stream, std::string type, std::string session,
                  std::map<std::string, std::string> strs, std::map<std::string, int64_t> ints) {
  launch(launcher, stream, &event_done,
         std::make_unique<Event>(Event{std::move(type), std::move(session), 0.0, std::move(strs), std::move(ints)}));
}

// The subscribed model: one thread of ours processes the reports of every
// stream the recorders launch on, subscribed to each before its first launch.
using Subscribe = int (*)(uint64_t thread, int64_t stream);
using ProcessReport = int (*)(int32_t timeout_ms);

struct ReportThread {
  std::mutex mutex;
  uint64_t thread = 0;  // 0: not started
  std::set<int64_t> streams;
};
ReportThread* g_report_thread = new ReportThread();  // a thread outlives exit
// A child of fork has none of its parent's threads: it starts its own.
void forget_report_thread_in_child() { g_report_thread = new ReportThread(); }

void subscribe_reports(int64_t subscribe, int64_t process, int64_t stream) {
  static const bool at_fork = (pthread_atfork(nullptr, nullptr, &forget_report_thread_in_child), true);
  (void)at_fork;
  ReportThread& reports = *g_report_thread;
  std::lock_guard<std::mutex> lock(reports.mutex);
  if (reports.thread == 0) {
    auto processor = reinterpret_cast<ProcessReport>(process);
    std::thread thread([processor] {
      for (;;) processor(1000);  // each return: one callback ran, or a timeout
    });
    reports.thread = static_cast<uint64_t>(thread.native_handle());
    thread.detach();
  }
  if (!reports.streams.insert(stream).second) return;
  if (reinterpret_cast<Subscribe>(subscribe)(reports.thread, stream) != 0) {
    reports.streams.erase(stream);
    throw std::runtime_error("subscribing the report thread to stream " + std::to_string(stream) + " failed");
  }
}

py::list drain_completions() {
  auto drained = g_completions.drain();
  py::list out;
  for (auto& c : drained) out.append(py::make_tuple(c.kind, py::bytes(c.payload)));  // bytes: msgpack is not UTF-8
  return out;
}

py::list drain_events() {
  auto drained = g_events.drain();
  py::list out;
  for (auto& e : drained) out.append(py::make_tuple(e.type, e.session, e.timestamp, e.strs, e.ints));
  return out;
}

}  // namespace

void bind_recorders(py::module& m) {
  m.def("subscribe_reports", &subscribe_reports, "Process the reports of a stream on a thread of ours (once).",
        py::call_guard<py::gil_scoped_release>());
  m.def("record_completion", &record_completion, "Publish (kind, payload) after the stream's queued work.",
        py::call_guard<py::gil_scoped_release>());
  m.def("drain_completions", &drain_completions, "The completions published so far, oldest first.");
  m.def("record_event", &record_event, "Publish an observability event after the stream's queued work.",
        py::call_guard<py::gil_scoped_release>());
  m.def("drain_events", &drain_events, "The events published so far, oldest first, each timestamped when published.");
}
