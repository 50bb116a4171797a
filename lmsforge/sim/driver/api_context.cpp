// Initialisation, devices, primary contexts and the thread's context stack.
//
// Only primary contexts exist (StreamExecutor uses nothing else): one per
// device, retained and released by count. The thread's current context is
// the top of its stack; making one current makes its device the thread's
// current device in the shared engine, so the runtime front end and the
// driver agree on it.

#include "driver.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <vector>

struct CUctx_st {
  int device = 0;
  unsigned flags = 0;          // cuDevicePrimaryCtxSetFlags (scheduling only)
  std::atomic<int> retains{0};
};

namespace lms_sim_driver {

namespace {

std::atomic<bool> init_done{false};
std::once_flag contexts_made;
std::vector<CUctx_st>* contexts = nullptr;

thread_local std::vector<CUcontext> context_stack;

std::vector<CUctx_st>& all_contexts() {
  std::call_once(contexts_made, [] {
    contexts = new std::vector<CUctx_st>(static_cast<size_t>(bridge::device_count()));
    for (size_t i = 0; i < contexts->size(); ++i) {
      (*contexts)[i].device = static_cast<int>(i);
    }
  });
  return *contexts;
}

bool valid_device(CUdevice device) {
  return device >= 0 && device < bridge::device_count();
}

bool known_context(CUcontext context) {
  std::vector<CUctx_st>& all = all_contexts();
  return context != nullptr && context >= all.data() && context < all.data() + all.size();
}

// Makes the engine's current device follow the thread's current context.
CUresult follow(const char* function, CUcontext context) {
  if (context == nullptr) {
    return CUDA_SUCCESS;
  }
  return as_result(function, bridge::use_device(context->device));
}

constexpr unsigned kScheduleFlags = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST |
    CU_CTX_LMEM_RESIZE_TO_MAX;

}  // namespace

CUcontext primary_context(int device) {
  return &all_contexts().at(static_cast<size_t>(device));
}

int context_device(CUcontext context) {
  return context->device;
}

CUcontext current_context() {
  return context_stack.empty() ? nullptr : context_stack.back();
}

bool initialized() {
  return init_done.load();
}

}  // namespace lms_sim_driver

using namespace lms_sim_driver;

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) {
  if (flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (bridge::in_host_function()) {
    return CUDA_ERROR_NOT_PERMITTED;
  }
  all_contexts();
  init_done = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The driver API this front end implements: that of the cuda.h it is built against.
  *driverVersion = CUDA_VERSION;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  return driver_call([&] {
    if (count == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *count = bridge::device_count();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  return driver_call([&] {
    if (device == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(ordinal)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    *device = ordinal;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
  const char* function = __func__;
  return driver_call([&] {
    if (!valid_device(dev)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    return as_result(function, bridge::device_name(dev, name, len));
  });
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  const char* function = __func__;
  return driver_call([&] {
    if (!valid_device(dev)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    return as_result(function, bridge::device_total_memory(dev, bytes));
  });
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
  const char* function = __func__;
  return driver_call([&] {
    if (!valid_device(dev)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    return as_result(function, bridge::device_attribute(dev, static_cast<int>(attrib), pi));
  });
}

CUresult CUDAAPI cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  return driver_call([&] {
    if (major == nullptr || minor == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    CUresult result = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                                           dev);
    return result != CUDA_SUCCESS
        ? result
        : cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  });
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char* pciBusId, int len, CUdevice dev) {
  const char* function = __func__;
  return driver_call([&] {
    return as_result(function, bridge::device_pci_bus_id(dev, pciBusId, len));
  });
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int* canAccessPeer, CUdevice dev, CUdevice peerDev) {
  const char* function = __func__;
  return driver_call([&] {
    if (canAccessPeer == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    bool can = false;
    CUresult result = as_result(function, bridge::can_access_peer(dev, peerDev, &can));
    *canAccessPeer = can ? 1 : 0;
    return result;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  const char* function = __func__;
  return driver_call([&] {
    if (pctx == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    // Creating the context is what the engine's first use of a device does;
    // the thread's current context (and device) stay as they were.
    CUcontext before = current_context();
    CUresult result = as_result(function, bridge::use_device(dev));
    CUresult restored = follow(function, before);
    if (result != CUDA_SUCCESS || restored != CUDA_SUCCESS) {
      return result != CUDA_SUCCESS ? result : restored;
    }
    CUcontext context = primary_context(dev);
    context->retains.fetch_add(1);
    *pctx = context;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return driver_call([&] {
    if (!valid_device(dev)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    CUcontext context = primary_context(dev);
    int left = context->retains.load();
    do {
      if (left == 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
      }
    } while (!context->retains.compare_exchange_weak(left, left - 1));
    // The engine keeps the device's state: a simulated context is never torn
    // down (nothing in it needs freeing, and its streams may still be in use).
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  return driver_call([&] {
    if (flags == nullptr || active == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (!valid_device(dev)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    *flags = primary_context(dev)->flags;
    *active = bridge::primary_context_active(dev) ? 1 : 0;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return driver_call([&] {
    if (!valid_device(dev)) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    if ((flags & ~kScheduleFlags) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    primary_context(dev)->flags = flags;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  return driver_call([&] {
    if (pctx == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *pctx = current_context();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  const char* function = __func__;
  return driver_call([&] {
    if (ctx != nullptr && !known_context(ctx)) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (ctx == nullptr) {
      if (!context_stack.empty()) {
        context_stack.pop_back();
      }
      return follow(function, current_context());
    }
    if (context_stack.empty()) {
      context_stack.push_back(ctx);
    } else {
      context_stack.back() = ctx;
    }
    return follow(function, ctx);
  });
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) {
  const char* function = __func__;
  return driver_call([&] {
    if (!known_context(ctx)) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    context_stack.push_back(ctx);
    return follow(function, ctx);
  });
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) {
  const char* function = __func__;
  return driver_call([&] {
    if (context_stack.empty()) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (pctx != nullptr) {
      *pctx = context_stack.back();
    }
    context_stack.pop_back();
    return follow(function, current_context());
  });
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  return context_call([&] {
    if (device == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *device = current_context()->device;
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuCtxSynchronize() {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::synchronize_current_device());
  });
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags) {
  const char* function = __func__;
  return context_call([&] {
    if (!known_context(peerContext)) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    if (Flags != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (peerContext == current_context()) {
      return CUDA_ERROR_INVALID_DEVICE;
    }
    return as_result(function, bridge::enable_peer_access(peerContext->device));
  });
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::stream_priority_range(leastPriority, greatestPriority));
  });
}

}  // extern "C"
