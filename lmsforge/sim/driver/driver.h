#pragma once

// What every exported driver function shares. The driver front end is built
// against the CUDA 11.8 `cuda.h` that the tensorflow==2.14.1 wheel ships
// (what StreamExecutor calls) and reaches the simulator only through the
// neutral seam `bridge.h`: no CUDA 13 runtime type is visible here.

#include "bridge.h"

#include <cuda.h>

namespace lms_sim_driver {

namespace bridge = lms_sim_bridge;

// A primary context: one per device, the same object for every retain
// (CUctx_st is defined in api_context.cpp).
CUcontext primary_context(int device);
int context_device(CUcontext context);

// The calling thread's context stack (cuCtxSetCurrent/Push/Pop); null if empty.
CUcontext current_context();

// cuInit has run.
bool initialized();

// The driver's code for a status of the bridge (the numbering the runtime and
// the driver share); an unknown code aborts naming `function`.
CUresult as_result(const char* function, bridge::Status status);

// The prologue of every driver call but cuInit, cuDriverGetVersion and
// cuGetError*: not initialised (CUDA_ERROR_NOT_INITIALIZED), or inside a host
// function (CUDA_ERROR_NOT_PERMITTED: CUDA forbids driver calls there, and
// TensorFlow review finding 6 is one), else the body's result.
template <typename Body>
CUresult driver_call(Body&& body) {
  if (!initialized()) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (bridge::in_host_function()) {
    return CUDA_ERROR_NOT_PERMITTED;
  }
  return body();
}

// As driver_call, for calls that need a current context (streams, memory,
// events): CUDA_ERROR_INVALID_CONTEXT without one.
template <typename Body>
CUresult context_call(Body&& body) {
  return driver_call([&]() -> CUresult {
    if (current_context() == nullptr) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    return body();
  });
}

}  // namespace lms_sim_driver
