// A CUDA 11.8 runtime front end of the simulator, `libcudart.so.11.0`, with the
// two runtime functions TensorFlow's StreamExecutor calls besides the driver:
// GpuDriver::AsynchronousMemcpyD2D asks whether the stream captures a graph
// (every device-to-device copy: GPUUtil::DeviceToDeviceCopy,
// CopyGPUTensorToSameGPU) and names a failure with cudaGetErrorString. The
// tensorflow==2.14.1 wheel reaches them through its cudart stubs, which
// dlopen this library. It is compiled against the wheel's 11.8
// cuda_runtime_api.h and reaches the simulator through bridge.h only, like
// the driver front end; any other runtime function is absent, and the
// wheel's stub then fails that call with cudaErrorSharedObjectSymbolNotFound.

#include "bridge.h"

#include <cuda_runtime_api.h>

namespace {

static_assert(CUDART_VERSION == 11080, "built against the wheel's CUDA 11.8 runtime header");

cudaError_t as_error(lms_sim_bridge::Status status) {
  return static_cast<cudaError_t>(status);
}

}  // namespace

extern "C" {

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     enum cudaStreamCaptureStatus* pCaptureStatus,
                                     unsigned long long* pId) {
  if (pId != nullptr) {
    lms_sim_bridge::not_simulated(__func__, "the capture id output");
  }
  if (pCaptureStatus == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (lms_sim_bridge::in_host_function()) {
    return cudaErrorNotPermitted;
  }
  int captured = 0;
  const lms_sim_bridge::Status status =
      lms_sim_bridge::stream_capture_status(static_cast<void*>(stream), &captured);
  if (status == lms_sim_bridge::kSuccess) {
    *pCaptureStatus = static_cast<cudaStreamCaptureStatus>(captured);
  }
  return as_error(status);
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotPermitted:
      return "operation not permitted";
    default:
      return "cuda_sim: an error the CUDA 11 runtime shim does not name";
  }
}

}  // extern "C"
