// Runtime functions that c10_cuda (or a test program) links against but that
// the simulator does not model. Each aborts naming itself, so that a program
// taking one of these paths fails loudly instead of "passing" on a guess:
// stream-ordered allocation (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync),
// IPC, managed and registered memory, and <<<>>> launches of nvcc kernels
// (programs under the simulator launch PTX or host functions instead).

#include "errors.h"

#include <cuda_runtime_api.h>

using lms_sim::not_simulated;

extern "C" {

cudaError_t cudaMallocAsync(void**, size_t, cudaStream_t) {
  not_simulated(__func__);
}

cudaError_t cudaFreeAsync(void*, cudaStream_t) {
  not_simulated(__func__);
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t*, int) {
  not_simulated(__func__);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) {
  not_simulated(__func__);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void*) {
  not_simulated(__func__);
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t, const cudaMemAccessDesc*, size_t) {
  not_simulated(__func__);
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t, size_t) {
  not_simulated(__func__);
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*) {
  not_simulated(__func__);
}

cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned int) {
  not_simulated(__func__);
}

cudaError_t cudaIpcCloseMemHandle(void*) {
  not_simulated(__func__);
}

cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t*, cudaEvent_t) {
  not_simulated(__func__);
}

cudaError_t cudaIpcOpenEventHandle(cudaEvent_t*, cudaIpcEventHandle_t) {
  not_simulated(__func__);
}

cudaError_t cudaMallocManaged(void**, size_t, unsigned int) {
  not_simulated(__func__);
}

cudaError_t cudaHostRegister(void*, size_t, unsigned int) {
  not_simulated(__func__);
}

cudaError_t cudaHostUnregister(void*) {
  not_simulated(__func__);
}

cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  not_simulated(__func__, "nvcc-compiled kernels have no host implementation; launch PTX "
                          "(cuLaunchKernel) or cudaLaunchHostFunc under the simulator");
}

cudaError_t cudaDeviceReset(void) {
  not_simulated(__func__);
}

} // extern "C"
