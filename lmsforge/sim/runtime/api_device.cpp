// Devices, versions and errors.
//
// The simulated devices call themselves "lmsforge cuda_sim" and report an
// H100's shape (compute capability 9.0, 132 multiprocessors, 3 copy engines)
// with the configured memory; nothing here claims to be a real GPU.

#include "api.h"

#include <cstring>
#include <mutex>
#include <set>
#include <utility>

namespace lms_sim {

namespace {

constexpr int kDriverVersion = 13000;

cudaDeviceProp properties(Runtime& runtime, int device) {
  cudaDeviceProp prop{};
  std::snprintf(prop.name, sizeof(prop.name), "lmsforge cuda_sim device %d (simulated)", device);
  for (size_t i = 0; i < sizeof(prop.uuid.bytes); ++i) {
    prop.uuid.bytes[i] = static_cast<char>(0x5a ^ (device * 16 + static_cast<int>(i)));
  }
  prop.totalGlobalMem = runtime.device(device).arena.capacity();
  prop.sharedMemPerBlock = 48 * 1024;
  prop.regsPerBlock = 65536;
  prop.warpSize = 32;
  prop.memPitch = 2147483647;
  prop.maxThreadsPerBlock = 1024;
  prop.maxThreadsDim[0] = prop.maxThreadsDim[1] = 1024;
  prop.maxThreadsDim[2] = 64;
  prop.maxGridSize[0] = 2147483647;
  prop.maxGridSize[1] = prop.maxGridSize[2] = 65535;
  prop.totalConstMem = 65536;
  prop.major = 9;
  prop.minor = 0;
  prop.multiProcessorCount = 132;
  prop.canMapHostMemory = 1;
  prop.concurrentKernels = 1;
  prop.pciBusID = device + 1;
  prop.asyncEngineCount = 3;
  prop.unifiedAddressing = 1;
  prop.memoryBusWidth = 5120;
  prop.l2CacheSize = 50 * 1024 * 1024;
  prop.maxThreadsPerMultiProcessor = 2048;
  prop.streamPrioritiesSupported = 1;
  prop.sharedMemPerMultiprocessor = 228 * 1024;
  prop.regsPerMultiprocessor = 65536;
  prop.managedMemory = 0;
  prop.computePreemptionSupported = 1;
  prop.maxBlocksPerMultiProcessor = 32;
  prop.memoryPoolsSupported = 0;
  return prop;
}

std::mutex peers_mutex;
std::set<std::pair<int, int>> peers_enabled;

} // namespace

} // namespace lms_sim

using namespace lms_sim;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (count == nullptr) {
      return kErrorInvalidValue;
    }
    *count = runtime.device_count();
    return kSuccess;
  });
}

cudaError_t cudaGetDevice(int* device) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (device == nullptr) {
      return kErrorInvalidValue;
    }
    *device = runtime.current_device();
    return kSuccess;
  });
}

cudaError_t cudaSetDevice(int device) {
  if (in_host_function()) {
    return as_cuda(record(kErrorNotPermitted));
  }
  Runtime& runtime = Runtime::get();
  if (!runtime.valid_device(device)) {
    return as_cuda(record(kErrorInvalidDevice));
  }
  // Since CUDA 12, cudaSetDevice initialises the device's primary context.
  runtime.set_current_device(device);
  runtime.create_context(device);
  return as_cuda(record(runtime.sticky_error(device)));
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (prop == nullptr) {
      return kErrorInvalidValue;
    }
    if (!runtime.valid_device(device)) {
      return kErrorInvalidDevice;
    }
    *prop = properties(runtime, device);
    return kSuccess;
  });
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (value == nullptr) {
      return kErrorInvalidValue;
    }
    if (!runtime.valid_device(device)) {
      return kErrorInvalidDevice;
    }
    cudaDeviceProp prop = properties(runtime, device);
    switch (attr) {
      case cudaDevAttrMaxThreadsPerBlock: *value = prop.maxThreadsPerBlock; break;
      case cudaDevAttrWarpSize: *value = prop.warpSize; break;
      case cudaDevAttrMultiProcessorCount: *value = prop.multiProcessorCount; break;
      case cudaDevAttrComputeCapabilityMajor: *value = prop.major; break;
      case cudaDevAttrComputeCapabilityMinor: *value = prop.minor; break;
      case cudaDevAttrAsyncEngineCount: *value = prop.asyncEngineCount; break;
      case cudaDevAttrUnifiedAddressing: *value = prop.unifiedAddressing; break;
      case cudaDevAttrConcurrentKernels: *value = prop.concurrentKernels; break;
      case cudaDevAttrPciBusId: *value = prop.pciBusID; break;
      case cudaDevAttrPciDeviceId: *value = prop.pciDeviceID; break;
      case cudaDevAttrPciDomainId: *value = prop.pciDomainID; break;
      case cudaDevAttrCanMapHostMemory: *value = prop.canMapHostMemory; break;
      case cudaDevAttrIntegrated: *value = prop.integrated; break;
      case cudaDevAttrMemoryPoolsSupported: *value = prop.memoryPoolsSupported; break;
      case cudaDevAttrManagedMemory: *value = prop.managedMemory; break;
      default:
        not_simulated(function, "attribute " + std::to_string(static_cast<int>(attr)));
    }
    return kSuccess;
  });
}

cudaError_t cudaDeviceGetPCIBusId(char* pciBusId, int len, int device) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (pciBusId == nullptr || len <= 0) {
      return kErrorInvalidValue;
    }
    if (!runtime.valid_device(device)) {
      return kErrorInvalidDevice;
    }
    std::snprintf(pciBusId, static_cast<size_t>(len), "0000:%02x:00.0", device + 1);
    return kSuccess;
  });
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (canAccessPeer == nullptr) {
      return kErrorInvalidValue;
    }
    if (!runtime.valid_device(device) || !runtime.valid_device(peerDevice)) {
      return kErrorInvalidDevice;
    }
    *canAccessPeer = device != peerDevice ? 1 : 0;
    return kSuccess;
  });
}

cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (flags != 0) {
      return kErrorInvalidValue;
    }
    int device = runtime.current_with_context().index;
    if (!runtime.valid_device(peerDevice) || peerDevice == device) {
      return kErrorInvalidDevice;
    }
    std::lock_guard<std::mutex> guard(peers_mutex);
    return peers_enabled.insert({device, peerDevice}).second
        ? kSuccess
        : kErrorPeerAccessAlreadyEnabled;
  });
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (driverVersion == nullptr) {
      return kErrorInvalidValue;
    }
    *driverVersion = kDriverVersion;
    return kSuccess;
  });
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (runtimeVersion == nullptr) {
      return kErrorInvalidValue;
    }
    *runtimeVersion = CUDART_VERSION;
    return kSuccess;
  });
}

cudaError_t cudaGetLastError(void) {
  Runtime& runtime = Runtime::get();
  Status sticky = runtime.sticky_error(runtime.current_device());
  Status last = take_last_error();
  return as_cuda(sticky != kSuccess ? sticky : last);
}

cudaError_t cudaPeekAtLastError(void) {
  Runtime& runtime = Runtime::get();
  Status sticky = runtime.sticky_error(runtime.current_device());
  return as_cuda(sticky != kSuccess ? sticky : peek_last_error());
}

const char* cudaGetErrorString(cudaError_t error) {
  return error_string(static_cast<Status>(error));
}

const char* cudaGetErrorName(cudaError_t error) {
  return error_name(static_cast<Status>(error));
}

} // extern "C"
