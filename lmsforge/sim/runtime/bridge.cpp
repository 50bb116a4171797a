// The runtime side of the neutral seam (bridge.h): every driver call the
// simulator models is answered by the runtime front end's own functions, so
// the driver gets exactly the runtime's rules (copy waits, poisoning, host
// functions, sticky faults, virtual time) over the one engine. This file sees
// the CUDA 13 runtime types only; the driver's 11.8 types never reach it.
//
// The runtime library is linked with -Bsymbolic-functions (CMakeLists.txt):
// a process that loads the driver beside TensorFlow's own `cuda*` stubs
// (which forward to a real libcudart) still reaches these functions.

#include "bridge.h"

#include "api.h"
#include "errors.h"
#include "calibration.h"
#include "state.h"
#include "timing.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

namespace lms_sim_bridge {

namespace {

cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

cudaEvent_t as_event(void* event) {
  return static_cast<cudaEvent_t>(event);
}

cudaMemcpyKind as_kind(Direction direction) {
  switch (direction) {
    case Direction::kHostToDevice: return cudaMemcpyHostToDevice;
    case Direction::kDeviceToHost: return cudaMemcpyDeviceToHost;
    case Direction::kDeviceToDevice: return cudaMemcpyDeviceToDevice;
    case Direction::kDefault: return cudaMemcpyDefault;
  }
  return cudaMemcpyDefault;
}

// Attributes the runtime's cudaDeviceGetAttribute does not list but that a
// driver client reads while describing a device (StreamExecutor does), from
// the same properties and the H100's clocks.
bool extra_attribute(const cudaDeviceProp& prop, int attribute, int* value) {
  switch (attribute) {
    case cudaDevAttrMaxBlockDimX: *value = prop.maxThreadsDim[0]; return true;
    case cudaDevAttrMaxBlockDimY: *value = prop.maxThreadsDim[1]; return true;
    case cudaDevAttrMaxBlockDimZ: *value = prop.maxThreadsDim[2]; return true;
    case cudaDevAttrMaxGridDimX: *value = prop.maxGridSize[0]; return true;
    case cudaDevAttrMaxGridDimY: *value = prop.maxGridSize[1]; return true;
    case cudaDevAttrMaxGridDimZ: *value = prop.maxGridSize[2]; return true;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(prop.sharedMemPerBlock);
      return true;
    case cudaDevAttrTotalConstantMemory: *value = static_cast<int>(prop.totalConstMem);
      return true;
    case cudaDevAttrMaxRegistersPerBlock: *value = prop.regsPerBlock; return true;
    case cudaDevAttrClockRate: *value = 1980000; return true;        // kHz, H100 SXM5 boost
    case cudaDevAttrMemoryClockRate: *value = 2619000; return true;  // kHz, HBM3
    case cudaDevAttrGlobalMemoryBusWidth: *value = prop.memoryBusWidth; return true;
    case cudaDevAttrL2CacheSize: *value = prop.l2CacheSize; return true;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = prop.maxThreadsPerMultiProcessor;
      return true;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(prop.sharedMemPerMultiprocessor);
      return true;
    case cudaDevAttrMaxRegistersPerMultiprocessor: *value = prop.regsPerMultiprocessor;
      return true;
    case cudaDevAttrEccEnabled: *value = 0; return true;
    case cudaDevAttrComputeMode: *value = 0; return true;  // default
    case cudaDevAttrKernelExecTimeout: *value = 0; return true;
    case cudaDevAttrIsMultiGpuBoard: *value = 0; return true;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; return true;
    default: return false;
  }
}

}  // namespace

void not_simulated(const char* function, const char* detail) {
  lms_sim::not_simulated(function, detail);
}

bool in_host_function() {
  return lms_sim::in_host_function();
}

int device_count() {
  return lms_sim::Runtime::get().device_count();
}

Status use_device(int device) {
  return cudaSetDevice(device);
}

bool primary_context_active(int device) {
  lms_sim::Runtime& runtime = lms_sim::Runtime::get();
  return runtime.valid_device(device) && runtime.device(device).context.load();
}

Status device_attribute(int device, int attribute, int* value) {
  if (value == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (!lms_sim::Runtime::get().valid_device(device)) {
    return cudaErrorInvalidDevice;
  }
  cudaDeviceProp prop{};
  Status status = cudaGetDeviceProperties(&prop, device);
  if (status == cudaSuccess && extra_attribute(prop, attribute, value)) {
    return cudaSuccess;
  }
  // The rest are the runtime's (it aborts naming an attribute it does not model).
  return cudaDeviceGetAttribute(value, static_cast<cudaDeviceAttr>(attribute), device);
}

Status device_name(int device, char* name, int length) {
  if (name == nullptr || length <= 0) {
    return cudaErrorInvalidValue;
  }
  cudaDeviceProp prop{};
  Status status = cudaGetDeviceProperties(&prop, device);
  if (status == cudaSuccess) {
    std::snprintf(name, static_cast<size_t>(length), "%s", prop.name);
  }
  return status;
}

Status device_total_memory(int device, size_t* bytes) {
  if (bytes == nullptr) {
    return cudaErrorInvalidValue;
  }
  cudaDeviceProp prop{};
  Status status = cudaGetDeviceProperties(&prop, device);
  if (status == cudaSuccess) {
    *bytes = prop.totalGlobalMem;
  }
  return status;
}

Status device_pci_bus_id(int device, char* text, int length) {
  return cudaDeviceGetPCIBusId(text, length, device);
}

Status can_access_peer(int device, int peer, bool* can) {
  int answer = 0;
  Status status = cudaDeviceCanAccessPeer(&answer, device, peer);
  *can = answer != 0;
  return status;
}

Status enable_peer_access(int peer) {
  return cudaDeviceEnablePeerAccess(peer, 0);
}

Status memory_info(size_t* free, size_t* total) {
  return cudaMemGetInfo(free, total);
}

Status stream_create(void** stream, bool non_blocking, int priority) {
  cudaStream_t created = nullptr;
  Status status = cudaStreamCreateWithPriority(
      &created, non_blocking ? cudaStreamNonBlocking : cudaStreamDefault, priority);
  if (status == cudaSuccess) {
    *stream = created;
  }
  return status;
}

Status stream_destroy(void* stream) {
  return cudaStreamDestroy(as_stream(stream));
}

Status stream_query(void* stream) {
  return cudaStreamQuery(as_stream(stream));
}

Status stream_synchronize(void* stream) {
  return cudaStreamSynchronize(as_stream(stream));
}

Status stream_capture_status(void* stream, int* status) {
  cudaStreamCaptureStatus captured = cudaStreamCaptureStatusNone;
  const Status result = cudaStreamIsCapturing(as_stream(stream), &captured);
  *status = static_cast<int>(captured);
  return result;
}

Status stream_wait_event(void* stream, void* event) {
  return cudaStreamWaitEvent(as_stream(stream), as_event(event), 0);
}

Status stream_priority_range(int* least, int* greatest) {
  return cudaDeviceGetStreamPriorityRange(least, greatest);
}

Status launch_host_function(void* stream, void (*function)(void*), void* data) {
  return cudaLaunchHostFunc(as_stream(stream), function, data);
}

Status synchronize_current_device() {
  return cudaDeviceSynchronize();
}

Status event_create(void** event, bool disable_timing) {
  cudaEvent_t created = nullptr;
  Status status = cudaEventCreateWithFlags(
      &created, disable_timing ? cudaEventDisableTiming : cudaEventDefault);
  if (status == cudaSuccess) {
    *event = created;
  }
  return status;
}

Status event_destroy(void* event) {
  return cudaEventDestroy(as_event(event));
}

Status event_record(void* event, void* stream) {
  return cudaEventRecord(as_event(event), as_stream(stream));
}

Status event_query(void* event) {
  return cudaEventQuery(as_event(event));
}

Status event_synchronize(void* event) {
  return cudaEventSynchronize(as_event(event));
}

Status event_elapsed_ms(float* ms, void* start, void* end) {
  return cudaEventElapsedTime(ms, as_event(start), as_event(end));
}

Status device_allocate(void** pointer, size_t bytes) {
  return cudaMalloc(pointer, bytes);
}

Status device_free(void* pointer) {
  return cudaFree(pointer);
}

Status host_allocate(void** pointer, size_t bytes, unsigned flags) {
  return cudaHostAlloc(pointer, bytes, flags);
}

Status host_free(void* pointer) {
  return cudaFreeHost(pointer);
}

Status copy(void* dst, const void* src, size_t bytes, Direction direction, void* stream,
            bool async) {
  if (async) {
    return cudaMemcpyAsync(dst, src, bytes, as_kind(direction), as_stream(stream));
  }
  return cudaMemcpy(dst, src, bytes, as_kind(direction));
}

Status copy_peer(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                 void* stream, bool async) {
  if (async) {
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, as_stream(stream));
  }
  Status status = cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, nullptr);
  return status == cudaSuccess ? cudaStreamSynchronize(nullptr) : status;
}

Status fill(void* dst, uint32_t value, size_t width, size_t count, void* stream, bool async) {
  return lms_sim::memset_elements(width == 1 ? "cuMemsetD8" : "cuMemsetD32", dst, value, width,
                                  count, as_stream(stream), async);
}

Status pointer_kind(const void* pointer, PointerKind* kind, int* device) {
  cudaPointerAttributes attributes{};
  Status status = cudaPointerGetAttributes(&attributes, pointer);
  if (status != cudaSuccess) {
    return status;
  }
  *device = attributes.device;
  *kind = attributes.type == cudaMemoryTypeDevice ? PointerKind::kDevice
      : attributes.type == cudaMemoryTypeHost     ? PointerKind::kHost
                                                  : PointerKind::kUnregistered;
  return cudaSuccess;
}

bool runtime_called() {
  return lms_sim::runtime_called();
}

namespace {

constexpr int kHandleDeviceShift = 56;

// The device whose range holds `pointer` (the runtime's own lookup), or -1.
int owner_of(lms_sim::Runtime& runtime, const void* pointer) {
  lms_sim::Place place = runtime.locate(pointer, 0);
  return place.kind == lms_sim::Place::kDevice ? place.device : -1;
}

int handle_device(uint64_t handle) {
  return static_cast<int>(handle >> kHandleDeviceShift);
}

uint64_t local_handle(uint64_t handle) {
  return handle & ((uint64_t(1) << kHandleDeviceShift) - 1);
}

}  // namespace

Status vmm_reserve(void** pointer, size_t bytes) {
  return lms_sim::api_call("cuMemAddressReserve", [&](lms_sim::Runtime& runtime) {
    return runtime.device(runtime.current_device()).arena.reserve_addresses(bytes, pointer);
  });
}

Status vmm_free(void* pointer, size_t bytes) {
  return lms_sim::api_call("cuMemAddressFree", [&](lms_sim::Runtime& runtime) {
    int device = owner_of(runtime, pointer);
    return device < 0 ? lms_sim::kErrorInvalidValue
                      : runtime.device(device).arena.free_addresses(pointer, bytes);
  });
}

Status vmm_create(uint64_t* handle, size_t bytes, int device) {
  return lms_sim::api_call("cuMemCreate", [&](lms_sim::Runtime& runtime) {
    if (!runtime.valid_device(device)) {
      return lms_sim::kErrorInvalidDevice;
    }
    uint64_t local = 0;
    lms_sim::Status status = runtime.device(device).arena.create_physical(bytes, &local);
    if (status == lms_sim::kSuccess) {
      *handle = (static_cast<uint64_t>(device) << kHandleDeviceShift) | local;
      // As long as cudaMalloc of the same size: the driver's allocation is the cost.
      lms_sim::Timing::get().charge_us(lms_sim::calibration().device_alloc_free_us.us_at(bytes) /
                                       2);
    }
    return status;
  });
}

Status vmm_release(uint64_t handle) {
  return lms_sim::api_call("cuMemRelease", [&](lms_sim::Runtime& runtime) {
    int device = handle_device(handle);
    return runtime.valid_device(device)
        ? runtime.device(device).arena.release_physical(local_handle(handle))
        : lms_sim::kErrorInvalidValue;
  });
}

Status vmm_map(void* pointer, size_t bytes, uint64_t handle) {
  return lms_sim::api_call("cuMemMap", [&](lms_sim::Runtime& runtime) {
    int device = owner_of(runtime, pointer);
    if (device < 0 || !runtime.valid_device(handle_device(handle))) {
      return lms_sim::kErrorInvalidValue;
    }
    if (device != handle_device(handle)) {
      not_simulated("cuMemMap", "memory of one device mapped into another's addresses");
    }
    return runtime.device(device).arena.map(pointer, bytes, local_handle(handle));
  });
}

Status vmm_set_access(void* pointer, size_t bytes, int device) {
  return lms_sim::api_call("cuMemSetAccess", [&](lms_sim::Runtime& runtime) {
    int owner = owner_of(runtime, pointer);
    if (owner < 0) {
      return lms_sim::kErrorInvalidValue;
    }
    if (device != owner) {
      not_simulated("cuMemSetAccess", "access for a peer device");
    }
    return runtime.device(owner).arena.set_access(pointer, bytes);
  });
}

Status vmm_unmap(void* pointer, size_t bytes) {
  return lms_sim::api_call("cuMemUnmap", [&](lms_sim::Runtime& runtime) {
    int device = owner_of(runtime, pointer);
    return device < 0 ? lms_sim::kErrorInvalidValue
                      : runtime.device(device).arena.unmap(pointer, bytes);
  });
}

size_t vmm_granularity() {
  return lms_sim::kGranule;
}

}  // namespace lms_sim_bridge
