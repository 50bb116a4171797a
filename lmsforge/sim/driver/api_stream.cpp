// Streams, events and host functions. CUstream and the runtime's
// cudaStream_t are the same engine object, so a stream made by either front
// end is a stream of both; the legacy and per-thread handles have the same
// values in both APIs.

#include "driver.h"

namespace lms_sim_driver {

namespace {

CUresult create_stream(const char* function, CUstream* stream, unsigned flags, int priority) {
  return context_call([&] {
    if (stream == nullptr || (flags & ~unsigned(CU_STREAM_NON_BLOCKING)) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    void* created = nullptr;
    CUresult result = as_result(
        function, bridge::stream_create(&created, (flags & CU_STREAM_NON_BLOCKING) != 0,
                                        priority));
    if (result == CUDA_SUCCESS) {
      *stream = static_cast<CUstream>(created);
    }
    return result;
  });
}

}  // namespace

}  // namespace lms_sim_driver

using namespace lms_sim_driver;

extern "C" {

CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  const char* function = __func__;
  return create_stream(function, phStream, Flags, 0);
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags,
                                            int priority) {
  const char* function = __func__;
  return create_stream(function, phStream, flags, priority);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream hStream) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::stream_destroy(hStream));
  });
}

CUresult CUDAAPI cuStreamQuery(CUstream hStream) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::stream_query(hStream));
  });
}

CUresult CUDAAPI cuStreamSynchronize(CUstream hStream) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::stream_synchronize(hStream));
  });
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  const char* function = __func__;
  return context_call([&] {
    if (Flags != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return as_result(function, bridge::stream_wait_event(hStream, hEvent));
  });
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void* userData) {
  const char* function = __func__;
  return context_call([&] {
    if (fn == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return as_result(function, bridge::launch_host_function(hStream, fn, userData));
  });
}

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  const char* function = __func__;
  return context_call([&] {
    // Blocking sync changes how a host waits, not what it waits for.
    constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING;
    if (phEvent == nullptr || (Flags & ~kKnown) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    void* created = nullptr;
    CUresult result = as_result(
        function, bridge::event_create(&created, (Flags & CU_EVENT_DISABLE_TIMING) != 0));
    if (result == CUDA_SUCCESS) {
      *phEvent = static_cast<CUevent>(created);
    }
    return result;
  });
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::event_destroy(hEvent));
  });
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::event_record(hEvent, hStream));
  });
}

CUresult CUDAAPI cuEventQuery(CUevent hEvent) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::event_query(hEvent));
  });
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::event_synchronize(hEvent));
  });
}

CUresult CUDAAPI cuEventElapsedTime(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::event_elapsed_ms(pMilliseconds, hStart, hEnd));
  });
}

}  // extern "C"
