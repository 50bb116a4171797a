#pragma once

// The neutral seam between the driver front end (compiled against the CUDA
// 11.8 `cuda.h` that TensorFlow's wheel ships) and the simulator (the engine
// and the runtime front end, compiled against the CUDA 13 runtime headers).
// It includes no CUDA header: handles are opaque pointers (a driver CUstream
// and a runtime cudaStream_t are the same `CUstream_st*` object of the
// engine), status codes are plain ints in the numbering the runtime and the
// driver share for every code the simulator returns (0 success, 1 invalid
// value, 2 out of memory, 101 invalid device, 400 invalid handle, 600 not
// ready, 700 illegal address, 800 not permitted, ...); the driver checks each
// one against its own enum (driver/status.cpp). Implemented in bridge.cpp,
// which forwards to the runtime front end, so both front ends share one
// engine: devices, streams, events, poisoning, seeds and timing.

#include <cstddef>
#include <cstdint>

namespace lms_sim_bridge {

using Status = int;
constexpr Status kSuccess = 0;

// The loud end (engine/errors.h), for driver functions the simulator does not model.
[[noreturn]] void not_simulated(const char* function, const char* detail = "");
// True on a stream worker running a host function, where CUDA calls are refused.
bool in_host_function();

int device_count();
// Whether a runtime API call was made: on a GPU the runtime initialises the driver, and
// PyTorch calls the driver's virtual memory API without cuInit of its own.
bool runtime_called();
// Makes `device` the calling thread's current device, its primary context created.
Status use_device(int device);
bool primary_context_active(int device);
// `attribute` is a CUdevice_attribute/cudaDeviceAttr value (the same numbers).
Status device_attribute(int device, int attribute, int* value);
Status device_name(int device, char* name, int length);
Status device_total_memory(int device, size_t* bytes);
Status device_pci_bus_id(int device, char* text, int length);
Status can_access_peer(int device, int peer, bool* can);
Status enable_peer_access(int peer);
Status memory_info(size_t* free, size_t* total);

Status stream_create(void** stream, bool non_blocking, int priority);
Status stream_destroy(void* stream);
Status stream_query(void* stream);
Status stream_synchronize(void* stream);
Status stream_wait_event(void* stream, void* event);
Status stream_priority_range(int* least, int* greatest);
Status launch_host_function(void* stream, void (*function)(void*), void* data);
Status synchronize_current_device();
// The stream's capture status in the numbering both APIs share (0 none, 1 active,
// 2 invalidated).
Status stream_capture_status(void* stream, int* status);

Status event_create(void** event, bool disable_timing);
Status event_destroy(void* event);
Status event_record(void* event, void* stream);
Status event_query(void* event);
Status event_synchronize(void* event);
Status event_elapsed_ms(float* ms, void* start, void* end);

Status device_allocate(void** pointer, size_t bytes);
Status device_free(void* pointer);
Status host_allocate(void** pointer, size_t bytes, unsigned flags);
Status host_free(void* pointer);

enum class Direction { kHostToDevice, kDeviceToHost, kDeviceToDevice, kDefault };
// Synchronous when `stream` is null and `async` false: the runtime's host waits.
Status copy(void* dst, const void* src, size_t bytes, Direction direction, void* stream,
            bool async);
Status copy_peer(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                 void* stream, bool async);
// Fills `count` elements of `width` bytes (1 or 4) with `value`.
Status fill(void* dst, uint32_t value, size_t width, size_t count, void* stream, bool async);

// The driver's virtual memory API over the device arenas (engine/memory.h): addresses
// from the calling thread's current device's range, physical memory of `device`
// (its number in a handle's top byte). A range and a handle of two devices are not
// modelled and end the process; a handle may be mapped at several addresses.
Status vmm_reserve(void** pointer, size_t bytes);
Status vmm_free(void* pointer, size_t bytes);
Status vmm_create(uint64_t* handle, size_t bytes, int device);
Status vmm_release(uint64_t handle);
Status vmm_map(void* pointer, size_t bytes, uint64_t handle);
// Read and write access for `device`, which must own the range (peers: not modelled).
Status vmm_set_access(void* pointer, size_t bytes, int device);
Status vmm_unmap(void* pointer, size_t bytes);
size_t vmm_granularity();

enum class PointerKind { kDevice, kHost, kUnregistered };
Status pointer_kind(const void* pointer, PointerKind* kind, int* device);

}  // namespace lms_sim_bridge
