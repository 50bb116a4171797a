#include "primary_context.h"

#include <c10/core/Device.h>
#include <c10/cuda/CUDAMacros.h>
#include <c10/util/Exception.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

// PyTorch 1.x has no such query (nothing in its c10 asks whether a primary context exists), so
// there is nothing to register: bench/CMakeLists.txt defines this where the tree declares it.
#if LMS_BENCH_C10_HAS_PRIMARY_CONTEXT_QUERY
namespace c10::cuda::_internal {
// Defined in c10/cuda/CUDAFunctions.cpp, declared by no header (CUDAHooks.cpp
// declares it the same way).
C10_CUDA_API void setHasPrimaryContext(bool (*func)(DeviceIndex));
} // namespace c10::cuda::_internal

namespace lms_bench {

namespace {

using PrimaryCtxGetState = decltype(&cuDevicePrimaryCtxGetState);

PrimaryCtxGetState resolve_query() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
#if CUDART_VERSION >= 12050
  cudaError_t status = cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &fn,
                                                        12000, cudaEnableDefault, &found);
#else
  cudaError_t status =
      cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &fn, cudaEnableDefault, &found);
#endif
  TORCH_CHECK(status == cudaSuccess && found == cudaDriverEntryPointSuccess && fn != nullptr,
              "cannot resolve the driver's cuDevicePrimaryCtxGetState: ",
              cudaGetErrorString(status));
  return reinterpret_cast<PrimaryCtxGetState>(fn);
}

bool has_primary_context(c10::DeviceIndex device) {
  static const PrimaryCtxGetState query = resolve_query();
  unsigned int flags = 0;
  int active = 0;
  CUresult result = query(static_cast<CUdevice>(device), &flags, &active);
  TORCH_CHECK(result == CUDA_SUCCESS, "cuDevicePrimaryCtxGetState(", static_cast<int>(device),
              ") failed with CUresult ", static_cast<int>(result));
  return active == 1;
}

} // namespace

void register_primary_context_query() {
  c10::cuda::_internal::setHasPrimaryContext(has_primary_context);
}

} // namespace lms_bench

#else

namespace lms_bench {
void register_primary_context_query() {}
} // namespace lms_bench

#endif
