// The engine's neutral codes (engine/status.h) are the CUDA runtime's numbers:
// checked here, where both are visible, so that api_call's cast is exact.

#include "status.h"

#include <cuda_runtime_api.h>

#include <type_traits>

namespace lms_sim {
namespace {

static_assert(int(kErrorCapturedEvent) == int(cudaErrorCapturedEvent));
static_assert(int(kErrorHostMemoryAlreadyRegistered) == int(cudaErrorHostMemoryAlreadyRegistered));
static_assert(int(kErrorIllegalAddress) == int(cudaErrorIllegalAddress));
static_assert(int(kErrorIllegalState) == int(cudaErrorIllegalState));
static_assert(int(kErrorInitializationError) == int(cudaErrorInitializationError));
static_assert(int(kErrorInvalidDevice) == int(cudaErrorInvalidDevice));
static_assert(int(kErrorInvalidMemcpyDirection) == int(cudaErrorInvalidMemcpyDirection));
static_assert(int(kErrorInvalidResourceHandle) == int(cudaErrorInvalidResourceHandle));
static_assert(int(kErrorInvalidValue) == int(cudaErrorInvalidValue));
static_assert(int(kErrorMemoryAllocation) == int(cudaErrorMemoryAllocation));
static_assert(int(kErrorNoDevice) == int(cudaErrorNoDevice));
static_assert(int(kErrorNotPermitted) == int(cudaErrorNotPermitted));
static_assert(int(kErrorNotReady) == int(cudaErrorNotReady));
static_assert(int(kErrorNotSupported) == int(cudaErrorNotSupported));
static_assert(int(kErrorPeerAccessAlreadyEnabled) == int(cudaErrorPeerAccessAlreadyEnabled));
static_assert(int(kErrorPeerAccessNotEnabled) == int(cudaErrorPeerAccessNotEnabled));
static_assert(int(kErrorStreamCaptureImplicit) == int(cudaErrorStreamCaptureImplicit));
static_assert(int(kErrorStreamCaptureInvalidated) == int(cudaErrorStreamCaptureInvalidated));
static_assert(int(kErrorStreamCaptureIsolation) == int(cudaErrorStreamCaptureIsolation));
static_assert(int(kErrorStreamCaptureMerge) == int(cudaErrorStreamCaptureMerge));
static_assert(int(kErrorStreamCaptureUnjoined) == int(cudaErrorStreamCaptureUnjoined));
static_assert(int(kErrorStreamCaptureUnmatched) == int(cudaErrorStreamCaptureUnmatched));
static_assert(int(kErrorStreamCaptureUnsupported) == int(cudaErrorStreamCaptureUnsupported));
static_assert(int(kErrorStreamCaptureWrongThread) == int(cudaErrorStreamCaptureWrongThread));
static_assert(int(kErrorSymbolNotFound) == int(cudaErrorSymbolNotFound));
static_assert(int(kErrorUnknown) == int(cudaErrorUnknown));
static_assert(int(kSuccess) == int(cudaSuccess));
static_assert(int(kCaptureModeGlobal) == int(cudaStreamCaptureModeGlobal));
static_assert(int(kCaptureModeThreadLocal) == int(cudaStreamCaptureModeThreadLocal));
static_assert(int(kCaptureModeRelaxed) == int(cudaStreamCaptureModeRelaxed));
static_assert(int(kCaptureStatusNone) == int(cudaStreamCaptureStatusNone));
static_assert(int(kCaptureStatusActive) == int(cudaStreamCaptureStatusActive));
static_assert(int(kCaptureStatusInvalidated) == int(cudaStreamCaptureStatusInvalidated));
static_assert(std::is_same_v<StreamHandle, cudaStream_t>, "stream handles");
static_assert(std::is_same_v<EventHandle, cudaEvent_t>, "event handles");
static_assert(int(kInvalidDeviceId) == int(cudaInvalidDeviceId));
static_assert(int(kStreamNonBlocking) == int(cudaStreamNonBlocking));

}  // namespace

// cudaStreamLegacy and cudaStreamPerThread are pointer constants (0x1, 0x2),
// which static_assert cannot compare: legacy_stream_handle() and
// per_thread_stream_handle() spell the same values.

}  // namespace lms_sim
