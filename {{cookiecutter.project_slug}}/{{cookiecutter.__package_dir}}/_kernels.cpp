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
// p % chunk_blocks; positions before skip are neither read nor written.

// What the bindings use: at::Tensor, TORCH_CHECK, pybind11 with torch's type
// casters. <torch/extension.h> would also parse libtorch's whole C++ API: 33 s
// to compile here instead of 10.
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace {

// A runtime's kernel launch: run kernel(args) on `stream` after the work queued
// on it; the kernel owns args.  Returns 0 on success.
// TODO(vendor): your runtime's launch (cudaLaunchKernel, aclrtLaunchKernel, ...);
// the emulator passes its own (torch.<device>.kernel_launcher()).
using Launch = int (*)(int64_t stream, void (*kernel)(void*), void* args);
// How a kernel reaches memory: nbytes at offset from base, an address it was
// given.  A device kernel uses device addresses as they are; the emulator's
// kernels run on the host and reach device memory through its translator, which
// refuses an access outside base's allocation as a device's MMU does, and host
// memory the device could not reach (pageable, or pinned but given at its host
// address where the device maps it elsewhere: _host_access.py). `access` tells
// the emulator's counters what the kernel does with the bytes (it pairs the
// bytes copied from with those copied to, by direction).
// TODO(vendor): drop it: your kernels dereference device addresses on the device.
using Translate = void* (*)(int64_t base, int64_t offset, int64_t nbytes, int64_t access);
constexpr int64_t kReads = 0, kCopiesFrom = 1, kCopiesTo = 2;

void launch(int64_t launcher, int64_t stream, void (*kernel)(void*), void* args, void (*discard)(void*)) {
  TORCH_CHECK(launcher != 0, "no kernel launcher given");
  if (reinterpret_cast<Launch>(launcher)(stream, kernel, args) != 0) {
    discard(args);
    TORCH_CHECK(false, "launching a kernel on stream ", stream, " failed (not a stream of this device?)");
  }
}

struct BlockCopy {
  Translate at;
  std::vector<int64_t> layer_bases, object_bases, block_ids;
  int64_t plane_stride_bytes, block_stride_bytes, block_bytes, planes, chunk_blocks, skip, positions;
  bool to_objects;
  // block_copy_device_ids: the block ids' device memory, read here, kept alive by
  // its storage until the kernel is done. Not the Tensor: its last reference
  // dropped on the stream thread would take the GIL.
  c10::Storage ids_storage;
  int64_t ids_address = 0;
  int64_t num_blocks = 0;  // with ids_address: ids must be in [0, num_blocks)
};

// Where one block of (plane k, layer l, flat position p) is, in the paged layer
// and in the chunk object; each access translated on its own, so the emulator
// checks it against its allocation. `access`: copied from or to.
char* paged_block(const BlockCopy& a, const int64_t* ids, int64_t k, int64_t l, int64_t p, int64_t access) {
  return static_cast<char*>(
      a.at(a.layer_bases[l], k * a.plane_stride_bytes + ids[p] * a.block_stride_bytes, a.block_bytes, access));
}
char* chunk_block(const BlockCopy& a, int64_t k, int64_t l, int64_t p, int64_t access) {
  const auto layers = static_cast<int64_t>(a.layer_bases.size());
  const int64_t slot = (k * layers + l) * a.chunk_blocks + p % a.chunk_blocks;
  return static_cast<char*>(a.at(a.object_bases[p / a.chunk_blocks], slot * a.block_bytes, a.block_bytes, access));
}

void block_copy_kernel(void* raw) {
  std::unique_ptr<BlockCopy> a(static_cast<BlockCopy*>(raw));
  const int64_t num_layers = static_cast<int64_t>(a->layer_bases.size());
  const int64_t* ids = a->block_ids.data();
  if (a->ids_address != 0) {
    ids = static_cast<const int64_t*>(a->at(a->ids_address, 0, a->positions * 8, kReads));
    // A device kernel cannot raise on the host: a bad id fails the stream (CUDA's
    // sticky error), and the next synchronization raises this.
    for (int64_t p = a->skip; p < a->positions; ++p)
      TORCH_CHECK(ids[p] >= 0 && ids[p] < a->num_blocks, "block id ", ids[p], " out of range [0, ", a->num_blocks, ")");
  }
  // One (plane, layer) at a time, its blocks in order: the chunk side of the copy is
  // then sequential (an object holds each (plane, layer)'s blocks back to back).
  for (int64_t k = 0; k < a->planes; ++k) {
    for (int64_t l = 0; l < num_layers; ++l) {
      for (int64_t p = a->skip; p < a->positions; ++p) {
        char* paged = paged_block(*a, ids, k, l, p, a->to_objects ? kCopiesFrom : kCopiesTo);
        char* chunk = chunk_block(*a, k, l, p, a->to_objects ? kCopiesTo : kCopiesFrom);
        std::memcpy(a->to_objects ? chunk : paged, a->to_objects ? paged : chunk, static_cast<size_t>(a->block_bytes));
      }
    }
  }
}

void block_copy(int64_t launcher, int64_t stream, int64_t translator, const std::vector<int64_t>& layer_bases,
                int64_t plane_stride_bytes, int64_t block_stride_bytes, int64_t block_bytes, int64_t planes,
                const std::vector<int64_t>& object_bases, int64_t chunk_blocks,
                const std::vector<int64_t>& block_ids, int64_t num_blocks, int64_t skip, bool to_objects) {
  TORCH_CHECK(chunk_blocks > 0 && block_bytes > 0 && planes >= 1, "invalid block geometry");
  TORCH_CHECK(skip >= 0, "skip_prefix_n_blocks must be >= 0");
  const int64_t positions = std::min<int64_t>(
      static_cast<int64_t>(block_ids.size()), static_cast<int64_t>(object_bases.size()) * chunk_blocks);
  // Where the ids enter the kernel, on the host: past this check nothing can raise
  // (IndexError, as LMCache's baseline raises), and a device would copy a
  // neighbouring allocation's bytes or fault the whole stream.
  for (int64_t p = skip; p < positions; ++p)
    TORCH_CHECK_INDEX(block_ids[p] >= 0 && block_ids[p] < num_blocks, "block id ", block_ids[p], " out of range [0, ",
                      num_blocks, ")");
  auto* args = new BlockCopy{reinterpret_cast<Translate>(translator), layer_bases, object_bases, block_ids,
                             plane_stride_bytes, block_stride_bytes, block_bytes, planes, chunk_blocks, skip,
                             positions, to_objects};
  launch(launcher, stream, &block_copy_kernel, args, [](void* p) { delete static_cast<BlockCopy*>(p); });
}

// block_copy with the block ids in device memory (LMCache-driven: the server keeps
// them there), read by the kernel; their storage is held until the kernel has run.
void block_copy_device_ids(int64_t launcher, int64_t stream, int64_t translator,
                           const std::vector<int64_t>& layer_bases, int64_t plane_stride_bytes,
                           int64_t block_stride_bytes, int64_t block_bytes, int64_t planes,
                           const std::vector<int64_t>& object_bases, int64_t chunk_blocks, const at::Tensor& block_ids,
                           int64_t num_blocks, int64_t skip, bool to_objects) {
  TORCH_CHECK(chunk_blocks > 0 && block_bytes > 0 && planes >= 1, "invalid block geometry");
  TORCH_CHECK(skip >= 0, "skip_prefix_n_blocks must be >= 0");
  TORCH_CHECK(block_ids.dim() == 1 && block_ids.scalar_type() == at::kLong && block_ids.is_contiguous(),
              "block ids must be a contiguous 1-D int64 tensor");
  const int64_t positions = std::min<int64_t>(block_ids.numel(), static_cast<int64_t>(object_bases.size()) * chunk_blocks);
  auto* args = new BlockCopy{reinterpret_cast<Translate>(translator), layer_bases, object_bases, {},
                             plane_stride_bytes, block_stride_bytes, block_bytes, planes, chunk_blocks, skip,
                             positions, to_objects, block_ids.storage(),
                             reinterpret_cast<int64_t>(block_ids.data_ptr()), num_blocks};
  launch(launcher, stream, &block_copy_kernel, args, [](void* p) { delete static_cast<BlockCopy*>(p); });
}

struct CopyBytes {
  Translate at;
  int64_t dest, src, nbytes;
};

void copy_bytes_kernel(void* raw) {
  std::unique_ptr<CopyBytes> a(static_cast<CopyBytes*>(raw));
  std::memcpy(a->at(a->dest, 0, a->nbytes, kCopiesTo), a->at(a->src, 0, a->nbytes, kCopiesFrom),
              static_cast<size_t>(a->nbytes));
}

void copy_bytes(int64_t launcher, int64_t stream, int64_t translator, int64_t dest, int64_t src, int64_t nbytes) {
  TORCH_CHECK(nbytes >= 0, "nbytes must be >= 0");
  launch(launcher, stream, &copy_bytes_kernel, new CopyBytes{reinterpret_cast<Translate>(translator), dest, src, nbytes},
         [](void* p) { delete static_cast<CopyBytes*>(p); });
}

}  // namespace

void bind_recorders(pybind11::module& m);  // _recorders.cpp

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "Native KV-block copies launched on a device stream (sample kernels).";
  m.def("block_copy", &block_copy, "Launch a copy of whole KV blocks between paged layers and chunk objects.");
  m.def("block_copy_device_ids", &block_copy_device_ids,
        "block_copy with the block ids in device memory, read (and checked) by the kernel.");
  m.def("copy_bytes", &copy_bytes, "Launch a copy of nbytes from src to dest.");
  bind_recorders(m);
}
