// SPDX-License-Identifier: Apache-2.0
//
// What the emulator does on behalf of this process, counted exactly: bytes it
// copies by direction, copies, kernel launches, device ops, host
// synchronizations, queries, host functions, IPC opens and closes
// (_counters.py says what each counter covers).
//
// Why it exists: timings on a CPU emulator say little about a device, where a
// byte across the bus, a launch or a host synchronization costs what it costs
// there.  What the plugin *does* per request carries to hardware, and it is
// deterministic: so it is counted where the emulator does it (ops.cpp,
// launch.cpp, streams.cpp, events.cpp, memory.cpp, faults.cpp) with one
// relaxed atomic add each.
//
// The counters live in this process's memory until count_in_file(dir) puts
// them in a shared mapping of <dir>/counters-<pid>.bin, which any process
// reads at any time (a forked child gets a file of its own).  Layout, native
// byte order (little-endian on every platform torch ships for):
//   0   8 bytes   magic "LMCCNT01"
//   8   uint64    N, the number of counters
//   16  uint64    B, bytes of the names block (a multiple of 8)
//   24  B bytes   the counters' names, '\n'-separated, NUL-padded
//   24+B N uint64 the counters, in the names' order, each 8-byte aligned
// Counters only grow: a reader takes differences.  The file stays after the
// process exits, with its last counts.

#include "emulator.h"

#include <c10/util/Exception.h>
#include <torch/csrc/utils/pybind.h>

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace emulator {

namespace {

const char* const kNames[kCounterCount] = {
    "bytes_h2d", "bytes_d2h",      "bytes_d2d",  "bytes_h2h",
    "copies",    "launches",       "device_ops", "host_syncs",
    "queries",   "host_functions", "ipc_opens",  "ipc_closes"};
constexpr char kMagic[8] = {'L', 'M', 'C', 'C', 'N', 'T', '0', '1'};

std::atomic<uint64_t> g_private[kCounterCount];
std::atomic<std::atomic<uint64_t>*> g_counters{g_private};
// What a file starts with (header and names), and the directory, kept ready for
// a forked child, which makes its own file before it may allocate.
std::vector<char> g_head;
char g_directory[4096] = {0};

std::atomic<uint64_t>* map_file(const char* directory) {
  char path[4200];
  std::snprintf(path, sizeof(path), "%s/counters-%d.bin", directory,
                static_cast<int>(getpid()));
  const size_t total = g_head.size() + kCounterCount * sizeof(uint64_t);
  const int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  void* ptr = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(total)) == 0)
    ptr = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (ptr == MAP_FAILED) return nullptr;
  std::memcpy(ptr, g_head.data(), g_head.size());  // counters start at zero
  return reinterpret_cast<std::atomic<uint64_t>*>(static_cast<char*>(ptr) +
                                                  g_head.size());
}

// A forked child is another process: its counts start at zero, in its own file
// (or its own memory, if that cannot be made).
void own_counters_in_child() {
  std::atomic<uint64_t>* file = map_file(g_directory);
  for (auto& counter : g_private) counter.store(0);
  g_counters = file != nullptr ? file : g_private;
}

void count_in_file(const std::string& directory) {
  TORCH_CHECK(g_counters.load() == g_private,
              "the counters are in a file already");
  TORCH_CHECK(directory.size() < sizeof(g_directory),
              "directory name too long");
  std::string names;
  for (const char* name : kNames) names += std::string(name) + "\n";
  names.resize((names.size() + 7) / 8 * 8, '\0');
  const uint64_t sizes[2] = {kCounterCount, names.size()};
  g_head.assign(kMagic, kMagic + 8);
  g_head.insert(g_head.end(), reinterpret_cast<const char*>(sizes),
                reinterpret_cast<const char*>(sizes) + sizeof(sizes));
  g_head.insert(g_head.end(), names.begin(), names.end());
  std::memcpy(g_directory, directory.c_str(), directory.size() + 1);
  std::atomic<uint64_t>* file = map_file(g_directory);
  TORCH_CHECK(file != nullptr, "cannot make the emulator's counter file in ",
              directory, ": ", std::strerror(errno),
              " (the directory must exist and be writable)");
  for (int i = 0; i < kCounterCount; ++i) file[i] = g_private[i].load();
  g_counters = file;
  static const bool at_fork =
      (pthread_atfork(nullptr, nullptr, &own_counters_in_child), true);
  (void)at_fork;
}

// A kernel's copies, paired: the i-th byte it copies from is the i-th byte it
// copies to, whatever order it translates the two ends in.  Only one side can
// be waiting at a time: its translations, oldest first, consecutive ones of
// the same memory merged (the pairing is the same).  Plain data, zeroed as
// static storage: one TLS lookup per translation, no allocation.
constexpr int kPendingRuns = 64;
struct Pending {
  int64_t side;  // kKernelCopiesFrom or kKernelCopiesTo, when size > 0
  int head, size;
  bool host[kPendingRuns];
  int64_t bytes[kPendingRuns];
};
thread_local Pending t_pending;

void wait_to_pair(Pending& p, int64_t side, bool host, int64_t nbytes) {
  const int last = (p.head + p.size - 1) % kPendingRuns;
  if (p.size > 0 && (p.host[last] == host || p.size == kPendingRuns)) {
    p.bytes[last] +=
        nbytes;  // a full queue merges: never in the sample's kernels
    return;
  }
  const int next = (p.head + p.size) % kPendingRuns;
  p.side = side;
  p.host[next] = host;
  p.bytes[next] = nbytes;
  ++p.size;
}

}  // namespace

void count(Counter counter, uint64_t n) {
  g_counters.load(std::memory_order_relaxed)[counter].fetch_add(
      n, std::memory_order_relaxed);
}

void count_copy(bool from_host, bool to_host, uint64_t nbytes) {
  count(from_host ? (to_host ? kBytesH2H : kBytesH2D)
                  : (to_host ? kBytesD2H : kBytesD2D),
        nbytes);
}

void kernel_starts() { t_pending.head = t_pending.size = 0; }

void count_kernel_access(bool host, int64_t nbytes, int64_t access) {
  TORCH_CHECK(access >= kKernelReads && access <= kKernelCopiesTo,
              "unknown kernel access ", access,
              ": 0 (read for the kernel itself), 1 (copied from), 2 (copied "
              "to)");
  if (access == kKernelReads || nbytes <= 0) return;
  Pending& p = t_pending;
  while (nbytes > 0 && p.size > 0 && p.side != access) {
    const int i = p.head;
    const int64_t n = std::min(nbytes, p.bytes[i]);
    const bool to_host = access == kKernelCopiesTo ? host : p.host[i];
    count_copy(access == kKernelCopiesTo ? p.host[i] : host, to_host,
               static_cast<uint64_t>(n));
    p.bytes[i] -= n;
    nbytes -= n;
    if (p.bytes[i] == 0) {
      p.head = (p.head + 1) % kPendingRuns;
      --p.size;
    }
  }
  if (nbytes > 0) wait_to_pair(p, access, host, nbytes);
}

void bind_counters(pybind11::module& m) {
  m.def("count_in_file", &count_in_file,
        "Keep the counters in <dir>/counters-<pid>.bin from now on.");
  m.def("counter_names", [] {
    return std::vector<std::string>(kNames, kNames + kCounterCount);
  });
  m.def("counter_values", [] {
    std::vector<uint64_t> values;
    for (int i = 0; i < kCounterCount; ++i)
      values.push_back(g_counters.load()[i].load());
    return values;
  });
}

}  // namespace emulator
