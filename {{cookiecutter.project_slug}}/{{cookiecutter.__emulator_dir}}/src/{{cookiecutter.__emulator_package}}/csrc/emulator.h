{% raw %}// SPDX-License-Identifier: Apache-2.0
//
// What the emulator's sources share: host_device.cpp (allocators, hooks, the
// module), host_memory.cpp (pinned host memory), memory.cpp, ops.cpp (aten
// kernels), streams.cpp, launch.cpp, events.cpp, guard.cpp (torch's device
// guard) and faults.cpp.  Nothing here knows the device's name.

#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/macros/Export.h>

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace at {
class TORCH_API Tensor;
}  // namespace at

namespace emulator {

constexpr c10::DeviceType kDevice = c10::DeviceType::PrivateUse1;
constexpr int kMaxDevices = 16;

extern std::atomic<c10::DeviceIndex> g_device_count;
extern thread_local c10::DeviceIndex t_current_device;
void check_index(c10::DeviceIndex index);
// Sets the thread's device and binds its context (guard.cpp); check_context
// refuses a runtime call on a thread that bound none (when contexts are
// required).
void set_current_device(c10::DeviceIndex index);
void check_context(const char* call);
extern std::atomic<bool> g_require_contexts;

// ------------------------------------------------------------------ memory --
// Device addresses are not host-addressable: host_view() gives the emulator's
// host view of device bytes (and refuses host memory, closed IPC mappings and
// another device's memory).  Allocations of kShareableBytes and more can be
// exported to other processes.
constexpr size_t kShareableBytes = 64 * 1024;
c10::DataPtr allocate_on(c10::DeviceIndex index, size_t nbytes);
void free_device_memory(void* address);
void empty_cache();
char* host_view(const void* address, size_t nbytes,
                c10::DeviceIndex device);  // device -1: any
int64_t device_of(int64_t ptr);
// (pid, fd, inode, offset, size, allowlist fd) of ipc.cpp's handles.
std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t> ipc_export(
    int64_t ptr);
int64_t ipc_open(int64_t pid, int64_t fd, int64_t inode, int64_t size,
                 int64_t index, int64_t allow_fd);
void ipc_allow(int64_t pid, int64_t fd, int64_t inode, int64_t importer);
std::tuple<int64_t, int64_t, int64_t> ipc_export_fd(int64_t ptr);  // VMM
int64_t ipc_open_fd(int64_t fd, int64_t size, int64_t index);
extern std::atomic<bool> g_vmm;  // allocations made now are VMM (memory.cpp)
extern std::atomic<bool> g_ipc_allowlist;  // importers must be allowed
void ipc_close(int64_t address);
std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>> ipc_imports();
bool holder_of(uintptr_t address, c10::DeviceIndex* device,
               uintptr_t* base);             // lock-free, for crash handlers
at::Tensor host_alias(const at::Tensor& t);  // a CPU tensor over a device
                                             // tensor's bytes (host_device.cpp)

// memory.cpp's allocations, which faults.cpp looks addresses up in.
constexpr int kImported =
    -1;  // Mapping::fd of a mapping imported from another process
constexpr int kPrivate =
    -2;  // Mapping::fd of a small, non-exportable allocation
constexpr int kClosed =
    -3;  // Mapping::fd of a closed import: its addresses stay reserved

struct Worker;  // a stream (streams.cpp)
struct Mapping {
  int fd;                       // the memfd, or kImported / kPrivate / kClosed
  size_t size;                  // bytes
  c10::DeviceIndex device = 0;  // the device the memory belongs to
  ino_t inode = 0;              // imports: the shared memory's identity
  int64_t pid = 0;              // imports: the exporting process
  char* shadow = nullptr;       // the host view of the bytes (none once closed)
  Worker* stream = nullptr;     // allocations: the stream a free is ordered on
  bool vmm = false;  // allocations: through the VMM API (no legacy IPC export)
};
extern std::mutex g_mutex;  // guards the allocations
extern std::map<uintptr_t, Mapping>
    g_mappings;  // by device base address (ipc.cpp adds imports)
void* reserve_addresses(size_t nbytes);   // device addresses, no access
char* map_shared(int fd, size_t nbytes);  // a host view of shared memory
const Mapping* find_holding(uintptr_t address,
                            uintptr_t* base = nullptr);  // caller holds g_mutex

// ------------------------------------------------------------------ faults --
// Faults a test switches on (faults.cpp).  A lost device fails every call on
// it.
extern std::atomic<bool> g_fault_oom, g_fault_ipc_open;
void set_faults(const std::vector<std::string>&
                    faults);  // oom, ipc_open, host_register, device_lost
bool take_transfer_fault();  // true once after device_lost is switched on: this
                             // transfer loses its device
[[noreturn]] void lose_device(
    c10::DeviceIndex device);  // marks it lost, raises lost_message()
bool device_lost(c10::DeviceIndex device);
void check_device(
    c10::DeviceIndex device);  // raises lost_message() for a lost device
std::string lost_message(c10::DeviceIndex device);
void attribute_faults();  // a host access to device addresses names the memory
                          // before the crash

// -------------------------------------------------------------- host memory --
// Pinned allocations and host registrations (host_memory.cpp).
extern std::atomic<bool> g_fault_host_register;
c10::Allocator* pinned_allocator();
bool is_pinned_allocation(const void* ptr);
bool host_register(int64_t ptr, int64_t size, int64_t flags);
bool host_unregister(int64_t ptr);
// Whether [ptr, ptr + size) is pinned: registered or from the pinned allocator
// (cudaPointerGetAttributes says cudaMemoryTypeHost for both).
bool host_is_pinned(int64_t ptr, int64_t size);
bool is_pinned_host(const at::Tensor& t);  // a CPU tensor's bytes are pinned
int64_t host_device_pointer(int64_t ptr);  // cudaHostGetDevicePointer
// emulator_kernel_address for addresses outside device memory.
void* host_kernel_address(uintptr_t address, int64_t offset, int64_t nbytes);

// ----------------------------------------------------------------- streams --
// Work enqueued on a stream runs later, in order, on that stream's own worker
// thread, no earlier than the configured latency after it was enqueued.  A
// ticket is a task's position in its stream: the host may wait for it.
struct Worker;
Worker* worker_for(c10::DeviceIndex device, c10::StreamId id);
Worker* current_worker(
    c10::DeviceIndex device);  // the calling thread's current stream
// `always`: the task runs on a failed stream too, where stream_failed() is
// true.
uint64_t enqueue(Worker* worker, std::function<void()> task,
                 bool always = false);
bool stream_failed();
c10::DeviceIndex running_device();  // the device of the stream running the
                                    // calling thread's task, or -1 (the host)
void clear_stream_failures();  // every stream of every device healthy again
                               // (set_faults)
void wait_ticket(Worker* worker,
                 uint64_t ticket);  // raises the stream's first failure, if any
void synchronize_worker(Worker* worker);  // everything enqueued so far
void host_synchronize(Worker* worker);  // the same, asked by the host: counted
void synchronize_device(c10::DeviceIndex device);  // every stream of the device
void set_latency_us(int64_t latency_us);
void without_gil(const std::function<void()>&
                     wait);  // a host wait: a stream task may need the GIL
Worker* worker_of_handle(int64_t handle);  // the stream a native handle names
c10::DeviceIndex worker_device(Worker* worker);
// Host functions (launch.cpp) queued on `worker` and not returned yet, and for
// how long the one running now has run (0 if none); `unprocessed`: for how long
// the stream has waited for a subscribed thread to take one (the subscribed
// model).
int pending_host_functions(Worker* worker);
double host_function_running_for(Worker* worker, bool unprocessed = false);
// A stream wait reports a deadlock once a host function of its stream has run
// this long while the waiter keeps the GIL, or waited this long for a thread.
constexpr double kHostFunctionDeadlockSeconds = 1.0;
bool query_worker(Worker* worker);  // everything enqueued has run
bool worker_idle(Worker* worker);   // the same, uncounted (the allocator's)

// ------------------------------------------------------------------ events --
// Handles are opaque (an Event* of events.cpp); interprocess ones can be
// exported.
int64_t event_create(bool interprocess);
void event_destroy(int64_t handle);
void event_record(int64_t handle, Worker* worker);
void event_block(
    int64_t handle,
    Worker* worker);  // `worker` waits, in stream order, for the event's work
bool event_query(int64_t handle);
void event_synchronize(int64_t handle);
std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t> event_ipc_handle(
    int64_t handle);
int64_t event_open(int64_t pid, int64_t fd, int64_t inode, int64_t index,
                   int64_t generation);

// ---------------------------------------------------------------- counters --
// What the emulator does on behalf of this process (counters.cpp; what each
// covers: _counters.py).  One relaxed atomic add each.
enum Counter : int {
  kBytesH2D,
  kBytesD2H,
  kBytesD2D,
  kBytesH2H,
  kCopies,
  kLaunches,
  kDeviceOps,
  kHostSyncs,
  kQueries,
  kHostFunctions,
  kIpcOpens,
  kIpcCloses,
  kCounterCount
};
void count(Counter counter, uint64_t n = 1);
void count_copy(bool from_host, bool to_host, uint64_t nbytes);
// How a kernel uses bytes it translated (emulator_kernel_address's `access`).
constexpr int64_t kKernelReads = 0, kKernelCopiesFrom = 1, kKernelCopiesTo = 2;
void kernel_starts();  // on the stream's worker, before each kernel
void count_kernel_access(bool host, int64_t nbytes, int64_t access);

}  // namespace emulator

// The host view of `nbytes` at `offset` from `base`, checked against base's
// allocation; host memory as it is (faults.cpp).  `access` says how the kernel
// uses them (kKernelReads, kKernelCopiesFrom, kKernelCopiesTo), for the
// counters.
extern "C" void* emulator_kernel_address(int64_t base, int64_t offset,
                                         int64_t nbytes, int64_t access);
{% endraw %}