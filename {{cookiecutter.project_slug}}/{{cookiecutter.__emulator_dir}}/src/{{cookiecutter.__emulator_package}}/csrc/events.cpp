// SPDX-License-Identifier: Apache-2.0
//
// Events of the emulated device, with CUDA's rules.
//
// Why it exists: LMCache orders work across streams and processes with events
// (the worker's forward before the server's copy, the server's copy before the
// worker's next step).  An event that completes early, or a handle that stays
// valid after its event is gone, hides a missing wait that fails on hardware.
//   * an event completes when the work queued before its record() has run;
//     stream waits, queries and host synchronization follow CUDA;
//   * interprocess events live in a per-process table of shared memory: a
//     handle names (process, table, slot, generation); destroying the event
//     makes its handle stale, as on a device, and an exited exporter's events
//     are complete;
//   * an event recorded behind a failed task or on a lost device never
//     completes: waiting on it raises, here and in every importing process;
//   * a stream wait refers to the imported event it waits on until the stream
//     has run it: destroying the import before then fails that stream, as a
//     runtime that frees the import's resources at once would (LMCache 0.5.6+
//     holds imports until then: hold_imported_event).
// Streams and their workers are in streams.cpp; nothing here allocates memory.

#include "emulator.h"

#include <c10/util/Exception.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>

namespace emulator {

namespace {

// One event's state.  Interprocess events keep it in this process's table of
// shared memory, so that importers read the exporter's progress.
struct Slot {
  std::atomic<uint64_t> recorded{0};  // records so far
  std::atomic<uint64_t> completed{
      0};  // the latest record whose preceding work has run
  std::atomic<uint64_t> generation{
      0};  // odd while an interprocess event owns the slot
  std::atomic<uint64_t> failed{
      0};  // a record whose stream had failed: the event never completes
};
constexpr size_t kSlots = 32768;
std::mutex g_table_mutex;
Slot* g_table = nullptr;  // this process's interprocess slots (memfd)
int g_table_fd = -1;
std::map<std::pair<int64_t, int64_t>, Slot*>
    g_opened_tables;  // (pid, inode) -> mapped table

struct Event {
  Slot* slot;
  uint64_t
      generation;  // the slot's generation this event owns (0: a private slot)
  int64_t index;   // slot index in the exporter's table, or -1
  bool owner;      // frees the slot on destroy
  // An import's waits queued and not yet run, and kDestroyed once it is: the
  // last of destroy and those waits frees it (a task stays small, no heap).
  std::atomic<uint64_t> waits{0};
};
constexpr uint64_t kDestroyed = uint64_t(1) << 63;

void check_alive(const Event* event) {
  TORCH_CHECK(event->generation == 0 ||
                  event->slot->generation.load() == event->generation,
              "this interprocess event was destroyed by the process that "
              "exported it: keep exported events "
              "alive while their handles are in use (LMCache 0.5.5+ keeps a "
              "ring of them, 0.5.4 none)");
}

void check_not_failed(const Slot* slot) {
  TORCH_CHECK(
      slot->failed.load() == 0,
      "the work this event waits for failed on its device (a lost device or a ",
      "failed task on the recording stream, perhaps in the process that "
      "exported the event): the event ",
      "will never complete. Report the failure instead of waiting");
}

void wait_for(Slot* slot, uint64_t target) {
  auto pause = std::chrono::microseconds(10);
  while (slot->completed.load() < target) {
    check_not_failed(slot);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(500));
  }
}

Slot* map_table(int fd) {
  void* ptr = mmap(nullptr, kSlots * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
  TORCH_CHECK(ptr != MAP_FAILED,
              "mapping an emulated event table failed: ", std::strerror(errno));
  return static_cast<Slot*>(ptr);
}

}  // namespace

int64_t event_create(bool interprocess) {
  if (!interprocess)
    return reinterpret_cast<int64_t>(new Event{new Slot(), 0, -1, true});
  std::lock_guard<std::mutex> lock(g_table_mutex);
  if (g_table == nullptr) {
    g_table_fd = memfd_create("lmcache-emulated-events", MFD_CLOEXEC);
    TORCH_CHECK(
        g_table_fd >= 0 && ftruncate(g_table_fd, kSlots * sizeof(Slot)) == 0,
        "creating the emulated event table failed: ", std::strerror(errno));
    g_table = map_table(g_table_fd);
  }
  static size_t cursor =
      0;  // slots are claimed round robin: a stale handle stays stale for long
  for (size_t n = 0; n < kSlots; ++n) {
    const size_t i = cursor++ % kSlots;
    Slot& slot = g_table[i];
    uint64_t generation = slot.generation.load();
    // Claimed atomically: a forked child shares its parent's table.
    if (generation % 2 == 0 &&
        slot.generation.compare_exchange_strong(generation, generation + 1)) {
      slot.recorded = 0;
      slot.completed = 0;
      slot.failed = 0;
      return reinterpret_cast<int64_t>(
          new Event{&slot, generation + 1, static_cast<int64_t>(i), true});
    }
  }
  TORCH_CHECK(
      false, "more than ", kSlots,
      " interprocess events are alive in this process: destroy unused ones");
}

void event_destroy(int64_t handle) {
  auto* event = reinterpret_cast<Event*>(handle);
  if (!event->owner && (event->waits.fetch_or(kDestroyed) & ~kDestroyed)) {
    return;  // the last wait queued on this import frees it
  }
  if (event->owner && event->generation != 0) {
    event->slot->generation.fetch_add(1);  // stale for every importer
  } else if (event->owner) {
    delete event->slot;
  }
  delete event;
}

void event_record(int64_t handle, Worker* worker) {
  auto* event = reinterpret_cast<Event*>(handle);
  check_alive(event);
  const uint64_t target = event->slot->recorded.fetch_add(1) + 1;
  Slot* slot = event->slot;
  enqueue(
      worker,
      [slot, target] {
        if (stream_failed()) {
          slot->failed = 1;
          return;
        }
        uint64_t seen = slot->completed.load();
        while (seen < target &&
               !slot->completed.compare_exchange_weak(seen, target)) {
        }
      },
      /*always=*/true);
}

bool event_query(int64_t handle) {
  count(kQueries);
  auto* event = reinterpret_cast<Event*>(handle);
  check_alive(event);
  check_not_failed(event->slot);
  return event->slot->completed.load() >= event->slot->recorded.load();
}

void event_synchronize(int64_t handle) {
  count(kHostSyncs);
  auto* event = reinterpret_cast<Event*>(handle);
  check_alive(event);
  const uint64_t target = event->slot->recorded.load();
  without_gil([&] { wait_for(event->slot, target); });
}

// `worker` waits, in stream order, for the work queued before the event's
// latest record.
void event_block(int64_t handle, Worker* worker) {
  auto* event = reinterpret_cast<Event*>(handle);
  check_alive(event);
  Slot* slot = event->slot;
  const uint64_t target = slot->recorded.load();
  if (slot->completed.load() >= target) return;
  if (event->owner) {
    enqueue(worker, [slot, target] { wait_for(slot, target); });
    return;
  }
  event->waits.fetch_add(1);
  enqueue(worker, [event, target] {
    Slot* slot = event->slot;  // the exporter's: outlives the import
    const uint64_t before = event->waits.fetch_sub(1);
    if (before == (kDestroyed | 1)) delete event;
    TORCH_CHECK(!(before & kDestroyed),
                "an imported event was destroyed before the stream wait queued "
                "on it ran: keep the import alive until its stream has passed "
                "the wait (LMCache 0.5.6+ holds it, hold_imported_event; "
                "before 0.5.6 the plugin's event backend must)");
    wait_for(slot, target);
  });
}

std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> event_ipc_handle(
    int64_t handle) {
  auto* event = reinterpret_cast<Event*>(handle);
  TORCH_CHECK(event->index >= 0,
              "ipc_handle() needs an Event created with interprocess=True");
  check_alive(event);
  struct stat identity{};
  TORCH_CHECK(fstat(g_table_fd, &identity) == 0,
              "fstat of the event table failed: ", std::strerror(errno));
  return {getpid(), g_table_fd, static_cast<int64_t>(identity.st_ino),
          event->index, static_cast<int64_t>(event->generation)};
}

int64_t event_open(int64_t pid, int64_t fd, int64_t inode, int64_t index,
                   int64_t generation) {
  TORCH_CHECK(
      index >= 0 && index < static_cast<int64_t>(kSlots) && generation % 2 == 1,
      "not an emulated interprocess event handle");
  std::lock_guard<std::mutex> lock(g_table_mutex);
  Slot*& table = g_opened_tables[{pid, inode}];
  if (table == nullptr) {
    const std::string path =
        "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    const int local = open(path.c_str(), O_RDWR | O_CLOEXEC);
    struct stat identity{};
    const bool same = local >= 0 && fstat(local, &identity) == 0 &&
                      static_cast<int64_t>(identity.st_ino) == inode;
    if (same) table = map_table(local);
    if (local >= 0) close(local);
    if (!same) {
      g_opened_tables.erase({pid, inode});
      // An exporter that has exited has no work left: its events are complete,
      // as on a device.
      const bool exited =
          kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
      TORCH_CHECK(exited, "cannot open emulated event handle ", path,
                  ": not an event table of that process");
      return reinterpret_cast<int64_t>(new Event{new Slot(), 0, -1, true});
    }
  }
  Slot* slot = &table[index];
  TORCH_CHECK(slot->generation.load() == static_cast<uint64_t>(generation),
              "emulated event handle is stale: the exporting process destroyed "
              "the event. Keep exported events "
              "alive while their handles may be imported (LMCache 0.5.5+ keeps "
              "a ring of them, 0.5.4 none)");
  return reinterpret_cast<int64_t>(
      new Event{slot, static_cast<uint64_t>(generation), index, false});
}

}  // namespace emulator
