// SPDX-License-Identifier: Apache-2.0
//
// The aten kernels of the emulated device.
//
// Why it exists: torch needs a few kernels of its own from a PrivateUse1
// backend (allocation, copies, views, set_), and runs every other op through a
// fallback.  Here copies follow CUDA's stream rules and go through the
// emulator's streams; every other op runs the CPU kernel on host aliases of the
// device memory, after the work queued on the current stream of each device it
// touches.  Allocation, pinned memory and hooks are in host_device.cpp.

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <ATen/NativeFunctions.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/as_strided_cpu_dispatch.h>
#include <ATen/ops/set_cpu_dispatch.h>
#include <c10/core/Allocator.h>
#include <torch/extension.h>
#include <torch/library.h>

#include "emulator.h"

#include <vector>

namespace {

using namespace emulator;

// Whether this thread runs a device op on the CPU fallback (counters.cpp).
thread_local bool t_in_device_op = false;

// --------------------------------------------------------------- kernels --

at::Tensor empty_memory_format(c10::IntArrayRef size,
                               std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> /*layout*/,
                               std::optional<at::Device> device,
                               std::optional<bool> /*pin_memory*/,
                               std::optional<at::MemoryFormat> memory_format) {
  c10::OptionalDeviceGuard guard(device);
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_generic(size, c10::GetAllocator(kDevice), keys,
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> /*layout*/,
                         std::optional<at::Device> device,
                         std::optional<bool> /*pin_memory*/) {
  c10::OptionalDeviceGuard guard(device);
  constexpr c10::DispatchKeySet keys(c10::DispatchKey::PrivateUse1);
  return at::detail::empty_strided_generic(size, stride,
                                           c10::GetAllocator(kDevice), keys,
                                           c10::dtype_or_default(dtype));
}

// Copies follow CUDA's rules.  They run on the current stream of the device
// involved (the destination's, between devices).  Host-to-device from pinned
// memory with non_blocking=True reads the source when it runs; from pageable
// memory the source is captured first.  Device-to-host returns at once only
// with non_blocking=True into pinned memory: until a synchronization, the host
// sees the old bytes.  Otherwise the host waits for the copy.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst,
                     bool non_blocking) {
  at::Tensor src_host = host_alias(self);
  at::Tensor dst_host = host_alias(dst);
  const bool same_bytes = src_host.data_ptr() == dst_host.data_ptr() &&
                          src_host.sizes() == dst_host.sizes() &&
                          src_host.strides() == dst_host.strides() &&
                          src_host.dtype() == dst_host.dtype();
  if (same_bytes) return dst;  // the CPU fallback's copy-back of an alias
  const bool from_device = self.device().type() == kDevice;
  const bool to_device = dst.device().type() == kDevice;
  // A device op's result, copied from the CPU fallback's output into new device
  // memory: a device writes it there, so it counts device to device.
  const bool from_host = !from_device && !t_in_device_op;
  const c10::DeviceIndex device =
      to_device ? dst.device().index() : self.device().index();
  Worker* worker = current_worker(device);
  if (from_device && to_device && self.device() != dst.device()) {
    synchronize_worker(current_worker(self.device().index()));
  }
  bool wait = !non_blocking;
  if (to_device && !from_device && non_blocking && !is_pinned_host(self))
    src_host = src_host.clone();
  if (from_device && !to_device) wait = wait || !is_pinned_host(dst);
  if (from_device && to_device)
    wait = false;  // device to device: stream ordered, never host blocking
  const uint64_t ticket = enqueue(
      worker, [src_host, dst_host, device, from_host, to_device]() mutable {
        c10::InferenceMode inference;  // the aliases may be inference tensors
                                       // (made under the caller's mode)
        // device_lost: a KV-sized copy (not a pointer table) stops halfway and
        // the device is gone.
        if (dst_host.nbytes() >= kShareableBytes && take_transfer_fault()) {
          const int64_t half =
              dst_host.dim() > 0 && src_host.sizes() == dst_host.sizes()
                  ? dst_host.size(0) / 2
                  : 0;
          if (half > 0)
            dst_host.narrow(0, 0, half).copy_(src_host.narrow(0, 0, half));
          lose_device(device);
        }
        dst_host.copy_(src_host);
        count_copy(from_host, !to_device, dst_host.nbytes());
        count(kCopies);
      });
  if (wait) {
    count(kHostSyncs);
    wait_ticket(worker, ticket);
  }
  return dst;
}

// Ops without a kernel here run at once: after the work queued on the current
// stream of every device they touch.
void drain_current_streams(const torch::jit::Stack& stack) {
  for (const auto& value : stack) {
    if (value.isTensor() && value.toTensor().defined() &&
        value.toTensor().device().type() == kDevice) {
      synchronize_worker(current_worker(value.toTensor().device().index()));
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) {
        if (t.defined() && t.device().type() == kDevice)
          synchronize_worker(current_worker(t.device().index()));
      }
    }
  }
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  host_synchronize(current_worker(self.device().index()));  // .item()
  return at::_local_scalar_dense(host_alias(self));
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size,
                      c10::IntArrayRef stride,
                      std::optional<int64_t> storage_offset) {
  return at::cpu::as_strided(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, c10::IntArrayRef size,
                         c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dim, int64_t size,
                  int64_t step) {
  return at::native::unfold(self, dim, size, step);
}

const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<at::MemoryFormat> memory_format) {
  return at::native::resize_(self, size, memory_format);
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source) {
  return at::cpu::set_(self, source);
}

at::Tensor& set_storage_offset(at::Tensor& self, at::Storage source,
                               int64_t storage_offset, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  return at::cpu::set_(self, source, storage_offset, size, stride);
}

at::Tensor& set_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::cpu::set_(self, source);
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0,
                       c10::GetAllocator(kDevice),
                       /*resizable=*/true);
  return at::cpu::set_(self, storage, 0, {0}, {});
}

// Zero-copy replacement for the CPU fallback's "copy every argument to the
// host" step: device memory *is* host memory, so hand out aliases.  Mutations
// made by the CPU kernel land in device memory directly, and the fallback's
// copy-back becomes a detected no-op in copy_from().  A tensor passed twice
// gets one alias: an in-place op arrives here as its out= variant with
// out == self, and CPU kernels (index_copy, scatter, ...) copy self into out
// unless both are the same tensor, which would copy the whole destination.
std::vector<at::Tensor> to_cpu(at::TensorList tensors) {
  std::vector<at::Tensor> out;
  out.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    size_t seen = 0;
    while (seen < i && !(t.defined() && tensors[seen].is_same(t))) ++seen;
    if (seen < i) {
      out.push_back(out[seen]);
    } else if (!t.defined()) {
      out.emplace_back();
    } else if (t.device().type() == kDevice) {
      out.push_back(host_alias(t));
    } else {
      out.push_back(t.cpu());
    }
  }
  return out;
}

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  drain_current_streams(*stack);
  count(kDeviceOps);
  t_in_device_op = true;
  try {
    at::native::cpu_fallback(op, stack);
  } catch (...) {
    t_in_device_op = false;
    throw;
  }
  t_in_device_op = false;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
  m.impl("empty_strided", TORCH_FN(empty_strided));
  m.impl("_copy_from", TORCH_FN(copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense));
  m.impl("as_strided", TORCH_FN(as_strided));
  m.impl("view", TORCH_FN(view));
  m.impl("_reshape_alias", TORCH_FN(reshape_alias));
  m.impl("unfold", TORCH_FN(unfold));
  m.impl("resize_", TORCH_FN(resize));
  m.impl("set_.source_Storage", TORCH_FN(set_storage));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor));
  m.impl("set_", TORCH_FN(set_empty));
  m.impl("_to_cpu", TORCH_FN(to_cpu));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>());
}
