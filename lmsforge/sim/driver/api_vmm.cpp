// The driver's virtual memory API, as PyTorch's expandable segments use it:
// reserve addresses, create physical memory, map it, give the device access,
// unmap, release, free the addresses (README "Driver front end"). Each call
// reaches the device arenas through the bridge (engine/memory.h has the
// rules). What a client could ask beyond that use (peers, offsets into a
// handle, fixed addresses, IPC handle types it then exports) is refused or
// ends the process naming itself, never accepted on a guess.

#include "driver.h"

#include <cstdint>

namespace lms_sim_driver {

namespace {

void* address(CUdeviceptr pointer) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(pointer));
}

// PyTorch never calls cuInit: on a GPU its first runtime call initialised the
// driver. So these calls need either.
template <typename Body>
CUresult vmm_call(Body&& body) {
  if (!initialized() && !bridge::runtime_called()) {
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  if (bridge::in_host_function()) {
    return CUDA_ERROR_NOT_PERMITTED;
  }
  return body();
}

// Pinned device memory of one device: the only kind the simulator has.
bool device_memory(const CUmemAllocationProp* prop) {
  return prop != nullptr && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
      prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE;
}

}  // namespace

}  // namespace lms_sim_driver

using namespace lms_sim_driver;

extern "C" {

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  const char* function = __func__;
  return vmm_call([&] {
    if (ptr == nullptr || flags != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (addr != 0 || (alignment != 0 && bridge::vmm_granularity() % alignment != 0)) {
      bridge::not_simulated(function, "a fixed address or an alignment above 2 MiB");
    }
    void* pointer = nullptr;
    CUresult result = as_result(function, bridge::vmm_reserve(&pointer, size));
    if (result == CUDA_SUCCESS) {
      *ptr = reinterpret_cast<uintptr_t>(pointer);
    }
    return result;
  });
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  const char* function = __func__;
  return vmm_call([&] { return as_result(function, bridge::vmm_free(address(ptr), size)); });
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity,
                                               const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  (void)option;  // minimum and recommended are the same here
  return vmm_call([&] {
    if (granularity == nullptr || !device_memory(prop)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *granularity = bridge::vmm_granularity();
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  const char* function = __func__;
  return vmm_call([&] {
    if (handle == nullptr || flags != 0 || !device_memory(prop)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    // The handle types asked for matter only to an export, which is not modelled.
    uint64_t created = 0;
    CUresult result = as_result(function, bridge::vmm_create(&created, size, prop->location.id));
    if (result == CUDA_SUCCESS) {
      *handle = static_cast<CUmemGenericAllocationHandle>(created);
    }
    return result;
  });
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  const char* function = __func__;
  return vmm_call([&] { return as_result(function, bridge::vmm_release(handle)); });
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  const char* function = __func__;
  return vmm_call([&] {
    if (flags != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (offset != 0) {
      bridge::not_simulated(function, "a mapping of part of a handle");
    }
    return as_result(function, bridge::vmm_map(address(ptr), size, handle));
  });
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  const char* function = __func__;
  return vmm_call([&] {
    if (desc == nullptr || count == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < count; ++i) {
      if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
          desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
        bridge::not_simulated(function, "access other than read-write for a device");
      }
      CUresult result =
          as_result(function, bridge::vmm_set_access(address(ptr), size, desc[i].location.id));
      if (result != CUDA_SUCCESS) {
        return result;
      }
    }
    return CUDA_SUCCESS;
  });
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  const char* function = __func__;
  return vmm_call([&] { return as_result(function, bridge::vmm_unmap(address(ptr), size)); });
}

}  // extern "C"
