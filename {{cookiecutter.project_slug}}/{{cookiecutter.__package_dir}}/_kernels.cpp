// SPDX-License-Identifier: {{ cookiecutter.license }}
{{ ("// " ~ cookiecutter._owner.vendor ~ "\n") if cookiecutter.ownership == "wheel" else "" }}//
// Native KV-block copies for the LMCache device plugin (bound through
// native_ops.py and DeviceOps.bind_native).
//
// Each op checks its arguments on the host, then launches a kernel on a stream
// and returns: the copy runs later, in stream order, as on a device.  The
// kernels here are the sample a vendor replaces; they run as the CPU
// emulator's device kernels, on its stream workers.
// TODO(vendor): launch your device's copy kernels (or DMA descriptors) on the
// stream, and keep the Python signatures in native_ops.py.
//
// block_copy moves whole paged KV blocks between per-layer paged caches and
// LMCache chunk objects, the work of LMCache's multi_layer_block_kv_transfer:
//   paged layer l, block b, plane k (K or V; MLA has one plane):
//       base_l + k * plane_stride + b * block_stride, block_bytes contiguous bytes
//   object o, plane k, layer l, block slot j (tokens j*BS .. j*BS+BS):
//       base_o + ((k * num_layers + l) * chunk_blocks + j) * block_bytes
// Flat position p of block_ids belongs to object p / chunk_blocks, slot
// p % chunk_blocks; positions before skip are neither read nor written. Each
// launch takes a bounded parameter block: the layer table and the block ids are
// read from device memory, at most four objects' addresses are in the block.

// What the bindings use: at::Tensor, TORCH_CHECK, pybind11 with torch's type
// casters. <torch/extension.h> would also parse libtorch's whole C++ API: 33 s
// to compile here instead of 10.
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

// A runtime's kernel launch: run kernel(params) on `stream` after the work queued
// on it, given the launch's copy of the `params_bytes` at `params` (cudaLaunchKernel
// copies a kernel's arguments when it is called, into a bounded parameter space).
// Returns 0 on success. Nothing in a parameter block may point at host memory the
// device cannot reach: tables a kernel reads live in device memory.
// TODO(vendor): your runtime's launch (cudaLaunchKernel, aclrtLaunchKernel, ...);
// the emulator passes its own (torch.<device>.kernel_launcher()).
using Launch = int (*)(int64_t stream, void (*kernel)(const void*), void* params, int64_t params_bytes);
// The largest parameter block a launch takes (CUDA's classic 4 KiB).
constexpr int64_t kMaxParamBytes = 4096;
// How a kernel reaches memory: nbytes at offset from base, an address it was
// given.  A device kernel uses device addresses as they are; the emulator's
// kernels run on the host and reach device memory through its translator, which
// refuses an access outside base's allocation as a device's MMU does, and host
// memory the device could not reach (the host's heap, pageable memory, or pinned
// memory given at its host address where the device maps it elsewhere:
// _host_access.py). `access` tells the emulator's counters what the kernel does
// with the bytes (it pairs the bytes copied from with those copied to).
// TODO(vendor): drop it: your kernels dereference device addresses on the device.
using Translate = void* (*)(int64_t base, int64_t offset, int64_t nbytes, int64_t access);
constexpr int64_t kReads = 0, kCopiesFrom = 1, kCopiesTo = 2;
// The chunk objects one launch addresses, as LMCache's CUDA kernel
// (MAX_CHUNKS_PER_LAUNCH, csrc/cuda/mp_mem_kernels.cu): a bounded block.
constexpr int64_t kMaxObjects = 4;

template <typename Params>
void launch(int64_t launcher, int64_t stream, void (*kernel)(const void*), Params params) {
  static_assert(std::is_trivially_copyable_v<Params> && sizeof(Params) <= kMaxParamBytes,
                "a kernel's parameters are a bounded block of plain data");
  TORCH_CHECK(launcher != 0, "no kernel launcher given");
  const int done = reinterpret_cast<Launch>(launcher)(stream, kernel, &params, sizeof(Params));
  TORCH_CHECK(done == 0, "launching a kernel on stream ", stream, " failed (", done,
              ": not a stream of this device, or a parameter block too large?)");
}

// Layer base addresses a parameter block holds itself (engine-driven: a worker's own
// caches); more layers take more launches.  The server's table is in device memory.
constexpr int64_t kMaxInlineLayers = 128;

struct BlockCopy {  // a launch's parameter block: plain data, copied at launch
  Translate at;
  int64_t layer_table;  // device address of int64 layer base addresses, or 0: `inline_layers`
  int64_t inline_layers[kMaxInlineLayers];  // layers first_layer .. first_layer + layer_count
  int64_t block_ids;                        // device address: `positions` int64 block ids
  int64_t objects[kMaxObjects];
  int64_t total_layers, first_layer, layer_count, interleaved, plane_stride_bytes, block_stride_bytes, block_bytes,
      planes, chunk_blocks, skip, positions, num_blocks, to_objects;
};

// Layer l's base address: from the table, where entry l is layer l or, `interleaved`
// (per-layer (K, V) tuples: [K0, V0, K1, V1, ...]), the Ks come first, then the Vs.
int64_t layer_base(const BlockCopy& a, const int64_t* table, int64_t l) {
  if (table == nullptr) return a.inline_layers[l - a.first_layer];
  const int64_t half = a.total_layers / 2;
  return table[a.interleaved == 0 ? l : l < half ? 2 * l : 2 * (l - half) + 1];
}

void block_copy_kernel(const void* raw) {
  const BlockCopy& a = *static_cast<const BlockCopy*>(raw);
  const int64_t* table = nullptr;
  if (a.layer_table != 0) table = static_cast<const int64_t*>(a.at(a.layer_table, 0, a.total_layers * 8, kReads));
  const auto* ids = static_cast<const int64_t*>(a.at(a.block_ids, 0, a.positions * 8, kReads));
  // A device kernel cannot raise on the host: a bad id fails the stream (CUDA's
  // sticky error), and the next synchronization raises this.
  for (int64_t p = a.skip; p < a.positions; ++p)
    TORCH_CHECK(ids[p] >= 0 && ids[p] < a.num_blocks, "block id ", ids[p], " out of range [0, ", a.num_blocks, ")");
  // One (plane, layer) at a time, its blocks in order: the chunk side of the copy is
  // then sequential (an object holds each (plane, layer)'s blocks back to back).
  for (int64_t k = 0; k < a.planes; ++k) {
    for (int64_t l = a.first_layer; l < a.first_layer + a.layer_count; ++l) {
      const int64_t base = layer_base(a, table, l);
      for (int64_t p = a.skip; p < a.positions; ++p) {
        const int64_t slot = (k * a.total_layers + l) * a.chunk_blocks + p % a.chunk_blocks;
        auto* paged = static_cast<char*>(a.at(base, k * a.plane_stride_bytes + ids[p] * a.block_stride_bytes,
                                              a.block_bytes, a.to_objects ? kCopiesFrom : kCopiesTo));
        auto* chunk = static_cast<char*>(a.at(a.objects[p / a.chunk_blocks], slot * a.block_bytes, a.block_bytes,
                                              a.to_objects ? kCopiesTo : kCopiesFrom));
        std::memcpy(a.to_objects ? chunk : paged, a.to_objects ? paged : chunk, static_cast<size_t>(a.block_bytes));
      }
    }
  }
}

// A 1-D table of 8-byte integers in device memory: its address and length.
std::pair<int64_t, int64_t> device_table(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.dim() == 1 && t.element_size() == 8 && t.is_contiguous() && !t.is_cpu(), what,
              " must be a contiguous 1-D tensor of 8-byte integers in device memory");
  return {reinterpret_cast<int64_t>(t.data_ptr()), t.numel()};
}

// Whole KV blocks between paged layers and chunk objects, in launches of at most
// kMaxObjects objects (and kMaxInlineLayers inline layers), each given its objects
// and the address of its slice of the ids.  The ids (and a layer table) are device
// tensors the caller holds until it has launched: a free is stream-ordered.
void copy_blocks(int64_t launcher, int64_t stream, BlockCopy a, const std::vector<int64_t>& layers,
                 const std::vector<int64_t>& objects, const at::Tensor& block_ids, int64_t skip) {
  const auto [ids, num_ids] = device_table(block_ids, "the block ids");
  TORCH_CHECK(a.chunk_blocks > 0 && a.block_bytes > 0 && a.planes >= 1 && a.total_layers >= 1,
              "invalid block geometry");
  TORCH_CHECK(skip >= 0, "skip_prefix_n_blocks must be >= 0");
  const auto num_objects = static_cast<int64_t>(objects.size());
  const int64_t positions = std::min<int64_t>(num_ids, num_objects * a.chunk_blocks);
  const int64_t group = a.layer_table != 0 ? a.total_layers : kMaxInlineLayers;
  for (int64_t first = 0; first * a.chunk_blocks < positions; first += kMaxObjects) {
    const int64_t start = first * a.chunk_blocks;  // this launch's first position
    a.block_ids = ids + start * 8;
    a.skip = std::max<int64_t>(0, skip - start);
    a.positions = std::min(positions - start, kMaxObjects * a.chunk_blocks);
    if (a.skip >= a.positions) continue;  // every block of these objects skipped
    std::copy_n(objects.begin() + first, std::min(kMaxObjects, num_objects - first), a.objects);
    for (a.first_layer = 0; a.first_layer < a.total_layers; a.first_layer += group) {
      a.layer_count = std::min(group, a.total_layers - a.first_layer);
      if (a.layer_table == 0) std::copy_n(layers.begin() + a.first_layer, a.layer_count, a.inline_layers);
      launch(launcher, stream, &block_copy_kernel, a);
    }
  }
}

// Engine-driven: the layers' base addresses, held in the parameter blocks.
void block_copy(int64_t launcher, int64_t stream, int64_t translator, const std::vector<int64_t>& layers,
                int64_t plane_stride_bytes, int64_t block_stride_bytes, int64_t block_bytes, int64_t planes,
                const std::vector<int64_t>& objects, int64_t chunk_blocks, const at::Tensor& block_ids,
                int64_t num_blocks, int64_t skip, bool to_objects) {
  BlockCopy a{reinterpret_cast<Translate>(translator), 0, {}, 0, {}, static_cast<int64_t>(layers.size()), 0, 0, 0,
              plane_stride_bytes, block_stride_bytes, block_bytes, planes, chunk_blocks, 0, 0, num_blocks,
              to_objects ? 1 : 0};
  copy_blocks(launcher, stream, a, layers, objects, block_ids, skip);
}

// LMCache-driven: the server's table of layer addresses, read by the kernel where
// it is (device memory); `interleaved` for per-layer (K, V) tuples.
void block_copy_table(int64_t launcher, int64_t stream, int64_t translator, const at::Tensor& layer_table,
                      bool interleaved, int64_t plane_stride_bytes, int64_t block_stride_bytes, int64_t block_bytes,
                      int64_t planes, const std::vector<int64_t>& objects, int64_t chunk_blocks,
                      const at::Tensor& block_ids, int64_t num_blocks, int64_t skip, bool to_objects) {
  const auto [table, layers] = device_table(layer_table, "the layer table");
  BlockCopy a{reinterpret_cast<Translate>(translator), table, {}, 0, {}, layers, 0, 0, interleaved ? 1 : 0,
              plane_stride_bytes, block_stride_bytes, block_bytes, planes, chunk_blocks, 0, 0, num_blocks,
              to_objects ? 1 : 0};
  copy_blocks(launcher, stream, a, {}, objects, block_ids, skip);
}

struct CopyBytes {  // a launch's parameter block
  Translate at;
  int64_t dest, src, nbytes;
};

void copy_bytes_kernel(const void* raw) {
  const CopyBytes& a = *static_cast<const CopyBytes*>(raw);
  std::memcpy(a.at(a.dest, 0, a.nbytes, kCopiesTo), a.at(a.src, 0, a.nbytes, kCopiesFrom),
              static_cast<size_t>(a.nbytes));
}

// The smallest kernel: nbytes from src to dest, device or mapped host memory (the
// ops copy with the runtime's async memcpy; the sample's tests launch this one).
void copy_bytes(int64_t launcher, int64_t stream, int64_t translator, int64_t dest, int64_t src, int64_t nbytes) {
  TORCH_CHECK(nbytes >= 0, "nbytes must be >= 0");
  launch(launcher, stream, &copy_bytes_kernel, CopyBytes{reinterpret_cast<Translate>(translator), dest, src, nbytes});
}

// A runtime's async copy by its copy engine (cudaMemcpyAsync, aclrtMemcpyAsync):
// nbytes from src to dst on `stream`, after the work queued on it; host memory at
// its host address, pinned.  kind: 1 to the device, 2 from it.  Returns 0 on success.
// TODO(vendor): your runtime's; the emulator passes its own
// (torch.<device>.memcpy_async_launcher()).
using MemcpyAsync = int (*)(int64_t dst, int64_t src, int64_t nbytes, int64_t kind, int64_t stream);

void memcpy_async(int64_t copier, int64_t dst, int64_t src, int64_t nbytes, int64_t kind, int64_t stream) {
  TORCH_CHECK(copier != 0, "no async copy given");
  const int done = reinterpret_cast<MemcpyAsync>(copier)(dst, src, nbytes, kind, stream);
  TORCH_CHECK(done == 0, "an async copy of ", nbytes, " bytes on stream ", stream, " failed (", done, ")");
}

}  // namespace

void bind_recorders(pybind11::module& m);  // _recorders.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Native KV-block copies launched on a device stream (sample kernels).";
  m.def("block_copy", &block_copy,
        "Launch copies of whole KV blocks between paged layers and chunk objects (block ids on the device).");
  m.def("block_copy_table", &block_copy_table, "block_copy with the layers' addresses in a device table.");
  m.def("copy_bytes", &copy_bytes, "Launch a copy of nbytes from src to dest.");
  m.def("memcpy_async", &memcpy_async, "Queue an async copy by the runtime's copy engine.");
  bind_recorders(m);
}
