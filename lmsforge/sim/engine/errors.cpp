#include "errors.h"

#include <cstdio>
#include <cstdlib>

namespace lms_sim {

namespace {

thread_local Status last_error = kSuccess;

struct Description {
  Status status;
  const char* name;
  const char* text;
};

// The codes the simulator returns, with the runtime's wording.
constexpr Description kDescriptions[] = {
    {kSuccess, "cudaSuccess", "no error"},
    {kErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {kErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {kErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {kErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {kErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {kErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {kErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle",
     "invalid resource handle"},
    {kErrorIllegalState, "cudaErrorIllegalState",
     "the operation cannot be performed in the present state"},
    {kErrorSymbolNotFound, "cudaErrorSymbolNotFound", "named symbol not found"},
    {kErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {kErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {kErrorPeerAccessAlreadyEnabled, "cudaErrorPeerAccessAlreadyEnabled",
     "peer access is already enabled"},
    {kErrorPeerAccessNotEnabled, "cudaErrorPeerAccessNotEnabled",
     "peer access has not been enabled"},
    {kErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {kErrorNotPermitted, "cudaErrorNotPermitted", "operation not permitted"},
    {kErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {kErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {kErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {kErrorStreamCaptureMerge, "cudaErrorStreamCaptureMerge",
     "operation would result in a merge of separate capture sequences"},
    {kErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not ended in the same stream as it began"},
    {kErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined",
     "capturing stream has unjoined work"},
    {kErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {kErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {kErrorCapturedEvent, "cudaErrorCapturedEvent",
     "operation not permitted on an event last recorded in a capturing stream"},
    {kErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {kErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const Description* describe(Status status) {
  for (const Description& d : kDescriptions) {
    if (d.status == status) {
      return &d;
    }
  }
  return nullptr;
}

} // namespace

const char* error_name(Status status) {
  const Description* d = describe(status);
  return d ? d->name : "unrecognized error code";
}

const char* error_string(Status status) {
  const Description* d = describe(status);
  return d ? d->text : "unrecognized error code";
}

Status record(Status status) {
  if (status != kSuccess) {
    last_error = status;
  }
  return status;
}

Status take_last_error() {
  Status status = last_error;
  last_error = kSuccess;
  return status;
}

Status peek_last_error() {
  return last_error;
}

void not_simulated(const char* function, const std::string& detail) {
  std::fprintf(stderr,
               "lms_cuda_sim: %s is not simulated%s%s; extend lmsforge/sim or run "
               "on a real GPU\n",
               function, detail.empty() ? "" : ": ", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

void report(const std::string& message) {
  std::fprintf(stderr, "lms_cuda_sim: %s\n", message.c_str());
  std::fflush(stderr);
}

} // namespace lms_sim
