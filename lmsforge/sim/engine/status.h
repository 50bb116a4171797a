#pragma once

// The engine's neutral vocabulary: status codes, capture modes and handles,
// without any CUDA header, so that one engine serves the runtime front end
// (built against the CUDA 13 runtime headers) and the driver front end (built
// against the CUDA 11.8 cuda.h of TensorFlow's wheel). The numbers are the
// CUDA runtime's (the driver shares them for every code here);
// runtime/status_check.cpp asserts each one against cuda_runtime_api.h.

// The engine's stream, event and graph objects. The CUDA headers declare
// cudaStream_t and CUstream (and the event and graph handles) as pointers to
// these same structs, so handles pass between the engine and both front ends
// unchanged.
struct CUstream_st;
struct CUevent_st;
struct CUgraph_st;
struct CUgraphExec_st;

namespace lms_sim {

enum Status : int {
  kSuccess = 0,
  kErrorInvalidValue = 1,
  kErrorMemoryAllocation = 2,
  kErrorInitializationError = 3,
  kErrorInvalidMemcpyDirection = 21,
  kErrorNoDevice = 100,
  kErrorInvalidDevice = 101,
  kErrorInvalidResourceHandle = 400,
  kErrorIllegalState = 401,
  kErrorSymbolNotFound = 500,
  kErrorNotReady = 600,
  kErrorIllegalAddress = 700,
  kErrorPeerAccessAlreadyEnabled = 704,
  kErrorPeerAccessNotEnabled = 705,
  kErrorHostMemoryAlreadyRegistered = 712,
  kErrorNotPermitted = 800,
  kErrorNotSupported = 801,
  kErrorStreamCaptureUnsupported = 900,
  kErrorStreamCaptureInvalidated = 901,
  kErrorStreamCaptureMerge = 902,
  kErrorStreamCaptureUnmatched = 903,
  kErrorStreamCaptureUnjoined = 904,
  kErrorStreamCaptureIsolation = 905,
  kErrorStreamCaptureImplicit = 906,
  kErrorCapturedEvent = 907,
  kErrorStreamCaptureWrongThread = 908,
  kErrorUnknown = 999,
};

// cudaStreamCaptureMode / CUstreamCaptureMode.
enum CaptureMode : int {
  kCaptureModeGlobal = 0,
  kCaptureModeThreadLocal = 1,
  kCaptureModeRelaxed = 2,
};

// cudaStreamCaptureStatus / CUstreamCaptureStatus.
enum CaptureStatus : int {
  kCaptureStatusNone = 0,
  kCaptureStatusActive = 1,
  kCaptureStatusInvalidated = 2,
};

using StreamHandle = CUstream_st*;
using EventHandle = CUevent_st*;

// The special stream handles, the same values in both APIs
// (cudaStreamLegacy = CU_STREAM_LEGACY, cudaStreamPerThread = CU_STREAM_PER_THREAD).
inline StreamHandle legacy_stream_handle() { return reinterpret_cast<StreamHandle>(0x1); }
inline StreamHandle per_thread_stream_handle() { return reinterpret_cast<StreamHandle>(0x2); }

constexpr int kInvalidDeviceId = -2;          // cudaInvalidDeviceId
constexpr unsigned kStreamNonBlocking = 0x1;  // cudaStreamNonBlocking = CU_STREAM_NON_BLOCKING

}  // namespace lms_sim
