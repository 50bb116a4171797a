#pragma once

// What every exported runtime function shares.

#include "errors.h"
#include "state.h"
#include "stream.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace lms_sim {

// The engine's status as the runtime's code: the numbers are the runtime's
// (status_check.cpp asserts them).
inline cudaError_t as_cuda(Status status) {
  return static_cast<cudaError_t>(status);
}

// The prologue and epilogue of a runtime call: refused inside host functions
// (kErrorNotPermitted), the current device's sticky error once its
// context is poisoned, and a failure remembered as the thread's last error.
//
// The body works in the engine's Status (engine/status.h); the exported
// function returns it as the runtime's cudaError_t, the same number.
template <typename Body>
cudaError_t api_call(const char* function, Body&& body) {
  if (in_host_function()) {
    return as_cuda(record(kErrorNotPermitted));
  }
  // Names the call in the message of a destroyed handle (state.h).
  struct CallName {
    const char* previous = current_call();
    explicit CallName(const char* call) {
      set_current_call(call);
      count_api_call();
    }
    ~CallName() { set_current_call(previous); }
  } call_name(function);
  try {
    Runtime& runtime = Runtime::get();
    Status sticky = runtime.sticky_error(runtime.current_device());
    if (sticky != kSuccess) {
      return as_cuda(record(sticky));
    }
    return as_cuda(record(body(runtime)));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "lms_cuda_sim: %s: internal error: %s\n", function, error.what());
    std::abort();
  }
}

std::string format_bytes(size_t bytes);

// cudaMemset(Async) with a 1- or 4-byte pattern, for the driver front end's
// cuMemsetD8/D32 (driver/bridge.h); `count` elements of `width` bytes.
cudaError_t memset_elements(const char* function, void* dst, uint32_t value, size_t width,
                            size_t count, cudaStream_t stream, bool async);

} // namespace lms_sim
