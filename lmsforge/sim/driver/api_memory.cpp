// Device and page-locked memory, copies, memsets and pointer queries. Each
// forwards to the runtime front end's function with the same rules (through
// bridge.h), so a driver copy waits, stages, poisons and faults exactly as a
// runtime copy does.

#include "driver.h"

#include <cstdint>
#include <string>

namespace lms_sim_driver {

namespace {

using bridge::Direction;

void* address(CUdeviceptr pointer) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(pointer));
}

CUresult copy(const char* function, void* dst, const void* src, size_t bytes,
              Direction direction, CUstream stream, bool async) {
  return context_call([&] {
    return as_result(function, bridge::copy(dst, src, bytes, direction, stream, async));
  });
}

CUresult fill(const char* function, CUdeviceptr dst, uint32_t value, size_t width, size_t count,
              CUstream stream, bool async) {
  return context_call([&] {
    return as_result(function,
                     bridge::fill(address(dst), value, width, count, stream, async));
  });
}

CUresult copy_peer(const char* function, CUdeviceptr dst, CUcontext dst_context,
                   CUdeviceptr src, CUcontext src_context, size_t bytes, CUstream stream,
                   bool async) {
  return context_call([&] {
    if (dst_context == nullptr || src_context == nullptr) {
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    return as_result(function,
                     bridge::copy_peer(address(dst), context_device(dst_context), address(src),
                                       context_device(src_context), bytes, stream, async));
  });
}

}  // namespace

}  // namespace lms_sim_driver

using namespace lms_sim_driver;

extern "C" {

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  const char* function = __func__;
  return context_call([&] {
    if (dptr == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (bytesize == 0) {
      return CUDA_ERROR_INVALID_VALUE;  // the driver refuses empty allocations
    }
    void* pointer = nullptr;
    CUresult result = as_result(function, bridge::device_allocate(&pointer, bytesize));
    if (result == CUDA_SUCCESS) {
      *dptr = reinterpret_cast<uintptr_t>(pointer);
    }
    return result;
  });
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::device_free(address(dptr)));
  });
}

CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  const char* function = __func__;
  return context_call([&] {
    // CU_MEMHOSTALLOC_* and cudaHostAlloc* are the same bits.
    return as_result(function, bridge::host_allocate(pp, bytesize, Flags));
  });
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
  const char* function = __func__;
  return context_call([&] {
    if (p == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return as_result(function, bridge::host_free(p));
  });
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  const char* function = __func__;
  return context_call([&] {
    return as_result(function, bridge::memory_info(free, total));
  });
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
  const char* function = __func__;
  return copy(function, address(dstDevice), srcHost, ByteCount, Direction::kHostToDevice,
              nullptr, false);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
  const char* function = __func__;
  return copy(function, dstHost, address(srcDevice), ByteCount, Direction::kDeviceToHost,
              nullptr, false);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                 size_t ByteCount) {
  const char* function = __func__;
  return copy(function, address(dstDevice), address(srcDevice), ByteCount,
              Direction::kDeviceToDevice, nullptr, false);
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount) {
  const char* function = __func__;
  return copy(function, address(dst), address(src), ByteCount, Direction::kDefault, nullptr,
              false);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost,
                                      size_t ByteCount, CUstream hStream) {
  const char* function = __func__;
  return copy(function, address(dstDevice), srcHost, ByteCount, Direction::kHostToDevice,
              hStream, true);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount,
                                      CUstream hStream) {
  const char* function = __func__;
  return copy(function, dstHost, address(srcDevice), ByteCount, Direction::kDeviceToHost,
              hStream, true);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice,
                                      size_t ByteCount, CUstream hStream) {
  const char* function = __func__;
  return copy(function, address(dstDevice), address(srcDevice), ByteCount,
              Direction::kDeviceToDevice, hStream, true);
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                               CUstream hStream) {
  const char* function = __func__;
  return copy(function, address(dst), address(src), ByteCount, Direction::kDefault, hStream,
              true);
}

CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
                              CUcontext srcContext, size_t ByteCount) {
  const char* function = __func__;
  return copy_peer(function, dstDevice, dstContext, srcDevice, srcContext, ByteCount, nullptr,
                   false);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext,
                                   CUdeviceptr srcDevice, CUcontext srcContext,
                                   size_t ByteCount, CUstream hStream) {
  const char* function = __func__;
  return copy_peer(function, dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream,
                   true);
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
  const char* function = __func__;
  return fill(function, dstDevice, uc, 1, N, nullptr, false);
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
  const char* function = __func__;
  return fill(function, dstDevice, ui, 4, N, nullptr, false);
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                 CUstream hStream) {
  const char* function = __func__;
  return fill(function, dstDevice, uc, 1, N, hStream, true);
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N,
                                  CUstream hStream) {
  const char* function = __func__;
  return fill(function, dstDevice, ui, 4, N, hStream, true);
}

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute,
                                       CUdeviceptr ptr) {
  const char* function = __func__;
  return driver_call([&] {
    if (data == nullptr) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    bridge::PointerKind kind = bridge::PointerKind::kUnregistered;
    int device = -1;
    CUresult result = as_result(function, bridge::pointer_kind(address(ptr), &kind, &device));
    if (result != CUDA_SUCCESS) {
      return result;
    }
    // The driver knows nothing of memory it did not allocate or register.
    if (kind == bridge::PointerKind::kUnregistered) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    switch (attribute) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned int*>(data) =
            kind == bridge::PointerKind::kDevice ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int*>(data) = device;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_CONTEXT:
        *static_cast<CUcontext*>(data) = primary_context(device);
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        // Unified addressing: device and host see the same address.
        *static_cast<CUdeviceptr*>(data) = ptr;
        return CUDA_SUCCESS;
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (kind != bridge::PointerKind::kHost) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        *static_cast<void**>(data) = address(ptr);
        return CUDA_SUCCESS;
      default:
        bridge::not_simulated(function,
                              ("attribute " + std::to_string(static_cast<int>(attribute)))
                                  .c_str());
    }
  });
}

}  // extern "C"
