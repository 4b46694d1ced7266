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
// A runtime without one keeps the synchronizing path (runtime.py).
{%- else %}
// An engine-driven-only plugin binds none of them: they serve LMCache-driven
// transfer, which it does not offer.
{%- endif %}

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
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
  m.def("record_completion", &record_completion, "Publish (kind, payload) after the stream's queued work.",
        py::call_guard<py::gil_scoped_release>());
  m.def("drain_completions", &drain_completions, "The completions published so far, oldest first.");
  m.def("record_event", &record_event, "Publish an observability event after the stream's queued work.",
        py::call_guard<py::gil_scoped_release>());
  m.def("drain_events", &drain_events, "The events published so far, oldest first, each timestamped when published.");
}
