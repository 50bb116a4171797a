// Device and page-locked memory, copies and memsets (cudaMalloc .. cudaMemsetAsync).
//
// Which calls wait on the host follows "API synchronization behavior" of the
// CUDA runtime documentation: a copy to pageable host memory returns when it
// is done; a copy from pageable memory returns once the source is staged; a
// synchronous cudaMemcpy waits unless it is device to device; cudaMemset is
// asynchronous unless it targets page-locked host memory; cudaFree and
// cudaFreeHost synchronise.

#include "api.h"
#include "calibration.h"
#include "capture.h"
#include "memory.h"
#include "settings.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

namespace lms_sim {

std::string format_bytes(size_t bytes) {
  if (bytes >= (size_t(1) << 20) && bytes % (size_t(1) << 20) == 0) {
    return std::to_string(bytes >> 20) + " MiB";
  }
  if (bytes >= 1024 && bytes % 1024 == 0) {
    return std::to_string(bytes >> 10) + " KiB";
  }
  return std::to_string(bytes) + " B";
}

namespace {

constexpr size_t kChunk = 256 * 1024;

// A copy engine moves blocks in no particular order, and what the
// destination holds before the copy completes is undefined. In adversarial
// mode both show: the destination is poisoned first, the blocks land in
// random order with pauses, so a reader that does not wait sees garbage.
void move_bytes(uint8_t* to, const uint8_t* from, size_t bytes, Rng& rng) {
  if (sparse_data()) {  // the windows only, in order: a replay of a model's sizes, not a test
    for_each_window(bytes, [&](size_t offset, size_t length) {
      std::memmove(to + offset, from + offset, length);
    });
    return;
  }
  bool overlap = to < from + bytes && from < to + bytes;
  if (!adversarial() || overlap || bytes <= kChunk) {
    std::memmove(to, from, bytes);
    return;
  }
  fill_poison(to, bytes, rng.next());
  std::vector<size_t> chunks((bytes + kChunk - 1) / kChunk);
  std::iota(chunks.begin(), chunks.end(), size_t(0));
  for (size_t i = chunks.size() - 1; i > 0; --i) {
    std::swap(chunks[i], chunks[rng.below(i + 1)]);
  }
  for (size_t chunk : chunks) {
    size_t offset = chunk * kChunk;
    std::memcpy(to + offset, from + offset, std::min(kChunk, bytes - offset));
    if (rng.uniform() < 0.02) {
      std::this_thread::sleep_for(std::chrono::microseconds(rng.below(300)));
    }
  }
}

// Fills `bytes` (a multiple of `width`, 1 or 4) with the `width`-byte pattern `value`
// (cudaMemset's byte, the driver's cuMemsetD32 word).
void fill_pattern(uint8_t* to, uint32_t value, size_t width, size_t bytes) {
  // Windows start at multiples of kSparseStride and span whole elements.
  for_each_window(bytes, [&](size_t offset, size_t length) {
    if (width == 1) {
      std::memset(to + offset, static_cast<int>(value & 0xff), length);
      return;
    }
    for (size_t at = offset; at + width <= offset + length; at += width) {
      std::memcpy(to + at, &value, width);
    }
  });
}

void set_bytes(uint8_t* to, uint32_t value, size_t width, size_t bytes, Rng& rng) {
  if (!adversarial() || bytes <= kChunk || sparse_data()) {
    fill_pattern(to, value, width, bytes);
    return;
  }
  size_t half = bytes / 2 / width * width;  // the halves split between elements
  bool high_first = rng.uniform() < 0.5;
  fill_pattern(to + (high_first ? half : 0), value, width, high_first ? bytes - half : half);
  if (rng.uniform() < 0.1) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng.below(300)));
  }
  fill_pattern(to + (high_first ? 0 : half), value, width, high_first ? half : bytes - half);
}

struct Endpoint {
  bool device;
  const void* address;
  std::shared_ptr<std::vector<uint8_t>> staged;  // a pageable source, copied at the call

  const uint8_t* read(size_t bytes) const {
    if (staged) {
      return staged->data();
    }
    return device ? Runtime::get().device_bytes(address, bytes)
                  : static_cast<const uint8_t*>(address);
  }
  uint8_t* write(size_t bytes) const {
    return device ? Runtime::get().device_bytes(address, bytes)
                  : static_cast<uint8_t*>(const_cast<void*>(address));
  }
};

const char* direction(bool from_device, bool to_device) {
  if (from_device) {
    return to_device ? "device->device" : "device->host";
  }
  return to_device ? "host->device" : "host->host";
}

bool kind_matches(cudaMemcpyKind kind, bool from_device, bool to_device, Status* status) {
  *status = kSuccess;
  switch (kind) {
    case cudaMemcpyHostToHost:
      return !from_device && !to_device;
    case cudaMemcpyHostToDevice:
      return !from_device && to_device;
    case cudaMemcpyDeviceToHost:
      return from_device && !to_device;
    case cudaMemcpyDeviceToDevice:
      return from_device && to_device;
    case cudaMemcpyDefault:
      return true;
  }
  *status = kErrorInvalidMemcpyDirection;
  return false;
}

// What a copy occupies on the device (timing.h): a host link for copies
// between device and host memory, the compute engine for copies within device
// memory, nothing for host to host.
Work copy_work(bool from_device, bool to_device, size_t bytes) {
  if (from_device && to_device) {
    return Timing::device_memory_work(static_cast<double>(bytes), static_cast<double>(bytes));
  }
  if (from_device || to_device) {
    return Work{from_device ? Engine::kToHost : Engine::kToDevice, static_cast<double>(bytes), 0};
  }
  return Work{};
}

enum class Api { kSynchronous, kAsync };

Status copy(const char* function, void* dst, const void* src, size_t bytes,
                 cudaMemcpyKind kind, const StreamRef& stream, Api api) {
  Runtime& runtime = Runtime::get();
  if (bytes == 0) {
    return kSuccess;
  }
  if (dst == nullptr || src == nullptr) {
    return kErrorInvalidValue;
  }
  Place to = runtime.locate(dst, bytes);
  Place from = runtime.locate(src, bytes);
  if (!to.live || !from.live) {
    return kErrorInvalidValue;  // a device range that is not allocated
  }
  bool to_device = to.kind == Place::kDevice;
  bool from_device = from.kind == Place::kDevice;
  Status status = kSuccess;
  if (!kind_matches(kind, from_device, to_device, &status)) {
    return status != kSuccess ? status : kErrorInvalidValue;
  }
  bool pageable_source = from.kind == Place::kPageable;
  bool pageable_target = to.kind == Place::kPageable;
  bool capturing = Captures::get().capturing(stream);
  if (capturing && (pageable_source || pageable_target)) {
    return kErrorStreamCaptureUnsupported;
  }
  bool host_waits;
  if (api == Api::kAsync) {
    host_waits = pageable_target || (!from_device && !to_device);
  } else {
    host_waits = !(from_device && to_device) && !(pageable_source && to_device);
    if (pageable_source && to_device) {
      // "A stream sync is performed before the copy is initiated."
      status = runtime.synchronize_stream(stream);
      if (status != kSuccess) {
        return status;
      }
    }
  }
  Endpoint target{to_device, dst, nullptr};
  Endpoint source{from_device, src, nullptr};
  if (pageable_source && !host_waits) {
    auto staged = std::make_shared<std::vector<uint8_t>>(bytes);
    std::memcpy(staged->data(), src, bytes);
    source.staged = std::move(staged);
  }
  Op op;
  op.kind = OpKind::kCopy;
  op.device = to_device ? to.device : from_device ? from.device : stream->device;
  op.what = std::string(function) + " " + format_bytes(bytes) + " " +
      direction(from_device, to_device);
  op.body = [target, source, bytes](ExecContext& context) {
    uint8_t* out = target.write(bytes);
    const uint8_t* in = source.read(bytes);
    if (out == nullptr || in == nullptr) {
      return kErrorIllegalAddress;
    }
    move_bytes(out, in, bytes, context.rng);
    return kSuccess;
  };
  op.work = copy_work(from_device, to_device, bytes);
  auto done = std::make_shared<Timestamp>();
  op.stamp = done;
  int device = op.device;
  Timing::get().charge(HostCall::kMemcpy);
  status = runtime.submit(stream, std::move(op));
  if (status != kSuccess || !host_waits || capturing) {
    return status;
  }
  return runtime.wait_for(done, device);
}

Status set(const char* function, void* dst, uint32_t value, size_t width, size_t bytes,
                const StreamRef& stream, Api api) {
  Runtime& runtime = Runtime::get();
  if (bytes == 0) {
    return kSuccess;
  }
  if (dst == nullptr) {
    return kErrorInvalidValue;
  }
  Place to = runtime.locate(dst, bytes);
  if (to.kind == Place::kPageable || !to.live) {
    return kErrorInvalidValue;
  }
  bool device_memory = to.kind == Place::kDevice;
  Op op;
  op.kind = OpKind::kMemset;
  op.device = device_memory ? to.device : stream->device;
  op.what = std::string(function) + " " + format_bytes(bytes) + " to " +
      std::to_string(width == 1 ? (value & 0xff) : value);
  op.body = [dst, value, width, bytes, device_memory](ExecContext& context) {
    uint8_t* out = device_memory ? Runtime::get().device_bytes(dst, bytes)
                                 : static_cast<uint8_t*>(dst);
    if (out == nullptr) {
      return kErrorIllegalAddress;
    }
    set_bytes(out, value, width, bytes, context.rng);
    return kSuccess;
  };
  if (device_memory) {
    op.work = Timing::device_memory_work(static_cast<double>(bytes), 0);
  }
  auto done = std::make_shared<Timestamp>();
  op.stamp = done;
  int device = op.device;
  Timing::get().charge(HostCall::kMemcpy);
  Status status = runtime.submit(stream, std::move(op));
  if (status != kSuccess || api == Api::kAsync || device_memory) {
    return status;
  }
  return runtime.wait_for(done, device);
}

StreamRef legacy_stream(Runtime& runtime) {
  return runtime.current_with_context().legacy;
}

} // namespace

} // namespace lms_sim

using namespace lms_sim;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (devPtr == nullptr) {
      return kErrorInvalidValue;
    }
    Status status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    status = runtime.current_with_context().arena.allocate(size, devPtr);
    if (status == kSuccess) {
      // The calibration prices cudaMalloc and cudaFree together: half each.
      Timing::get().charge_us(calibration().device_alloc_free_us.us_at(size) / 2);
    }
    return status;
  });
}

cudaError_t cudaFree(void* devPtr) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    runtime.current_with_context();
    if (devPtr == nullptr) {
      return kSuccess;  // the idiom that creates the context
    }
    Status status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    for (int index = 0; index < runtime.device_count(); ++index) {
      Device& device = runtime.device(index);
      void* base = nullptr;
      size_t size = 0;
      if (!device.arena.find(devPtr, &base, &size) || base != devPtr) {
        continue;
      }
      // cudaFree waits for the device: no queued work may still use the memory.
      status = runtime.synchronize_device(index);
      if (status != kSuccess) {
        return status;
      }
      Timing::get().charge_us(calibration().device_alloc_free_us.us_at(size) / 2);
      return device.arena.free(devPtr) ? kSuccess : kErrorInvalidValue;
    }
    return kErrorInvalidValue;
  });
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    constexpr unsigned kKnown = cudaHostAllocPortable | cudaHostAllocMapped |
        cudaHostAllocWriteCombined;
    if (pHost == nullptr || (flags & ~kKnown) != 0) {
      return kErrorInvalidValue;
    }
    Status status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    status = runtime.pinned().allocate(size, runtime.current_with_context().index, pHost);
    if (status == kSuccess) {
      // Page-locking is slow (about 0.6 ms per MiB on the H100), and the
      // driver holds the other threads' calls meanwhile; the calibration
      // prices cudaHostAlloc and cudaFreeHost together: half each.
      Timing::get().hold_driver_us(calibration().pinned_alloc_free_us.us_at(size) / 2);
    }
    return status;
  });
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (ptr == nullptr) {
      return kSuccess;
    }
    Status status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    void* base = nullptr;
    size_t size = 0;
    int device = 0;
    if (!runtime.pinned().find(ptr, &base, &size, &device) || base != ptr) {
      return kErrorInvalidValue;
    }
    status = runtime.synchronize_all();
    if (status != kSuccess) {
      return status;
    }
    Timing::get().hold_driver_us(calibration().pinned_alloc_free_us.us_at(size) / 2);
    return runtime.pinned().free(ptr) ? kSuccess : kErrorInvalidValue;
  });
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (attributes == nullptr) {
      return kErrorInvalidValue;
    }
    *attributes = cudaPointerAttributes{};
    Place place = runtime.locate(ptr, 1);
    if (place.kind == Place::kDevice && place.live) {
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = place.device;
      attributes->devicePointer = const_cast<void*>(ptr);
    } else if (place.kind == Place::kPinned) {
      attributes->type = cudaMemoryTypeHost;
      attributes->device = place.device;
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->hostPointer = const_cast<void*>(ptr);
    } else {
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = cudaInvalidDeviceId;
    }
    return kSuccess;
  });
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (free == nullptr || total == nullptr) {
      return kErrorInvalidValue;
    }
    Device& device = runtime.current_with_context();
    *total = device.arena.capacity();
    *free = device.arena.capacity() - device.arena.used();
    return kSuccess;
  });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    return copy(function, dst, src, count, kind, legacy_stream(runtime), Api::kSynchronous);
  });
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    runtime.current_with_context();
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    return copy(function, dst, src, count, kind, target, Api::kAsync);
  });
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dstDevice, const void* src, int srcDevice,
                                size_t count, cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (!runtime.valid_device(dstDevice) || !runtime.valid_device(srcDevice)) {
      return kErrorInvalidDevice;
    }
    runtime.current_with_context();
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    Place to = runtime.locate(dst, count);
    Place from = runtime.locate(src, count);
    if (count != 0 && (to.kind != Place::kDevice || to.device != dstDevice ||
                       from.kind != Place::kDevice || from.device != srcDevice)) {
      return kErrorInvalidValue;
    }
    return copy(function, dst, src, count, cudaMemcpyDeviceToDevice, target, Api::kAsync);
  });
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    return set(function, devPtr, static_cast<uint32_t>(value), 1, count, legacy_stream(runtime),
               Api::kSynchronous);
  });
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return lms_sim::memset_elements(__func__, devPtr, static_cast<uint32_t>(value), 1, count, stream,
                                  true);
}

} // extern "C"

namespace lms_sim {

// The driver front end's cuMemsetD8/D32 (driver/bridge.h), with cudaMemset's rules.
cudaError_t memset_elements(const char* function, void* dst, uint32_t value, size_t width,
                            size_t count, cudaStream_t stream, bool async) {
  return api_call(function, [&](Runtime& runtime) {
    runtime.current_with_context();
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    return set(function, dst, value, width, count * width, target,
               async ? Api::kAsync : Api::kSynchronous);
  });
}

} // namespace lms_sim
