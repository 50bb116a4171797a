#pragma once

// What a program built for lmsforge's simulated CUDA runtime may use beyond
// the CUDA runtime API: kernels implemented on the host. Programs that run on
// both a GPU and the simulator keep these calls in a file built only for the
// simulator (bench/kernels_sim.cpp beside bench/kernels.cu).

#include <cuda_runtime_api.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// A host kernel: reads and writes device memory through lmsSimDeviceBytes and
// returns cudaErrorIllegalAddress where a real kernel would fault.
typedef cudaError_t (*lmsSimKernelFn)(void* args);

// What the kernel would do on the GPU, for its duration in virtual time:
// the longest of its memory traffic at the device's memory bandwidth, its
// 32-bit integer ALU operations at the device's ALU rate (the calibration
// table, lmsforge/sim/README.md), and a time it asks for.
typedef struct {
  double memory_bytes;
  double alu_ops;
  double requested_ns;
} lmsSimKernelWork;

// Queues `fn` on `stream` as a kernel named `name` that does `work` (NULL:
// it takes no device time): it runs in stream order on the simulated device,
// with the adversarial delays, and a fault poisons the context as a real one
// does. `args` (`args_bytes` of them) are copied at launch, as kernel
// arguments are.
cudaError_t lmsSimLaunchHostKernel(cudaStream_t stream, const char* name, lmsSimKernelFn fn,
                                   const void* args, size_t args_bytes,
                                   const lmsSimKernelWork* work);

// The timing model's calibration table in effect, as a JSON object (its
// name, the override file if any, every value with its unit and source):
// what results timed on the simulator were computed with.
const char* lmsSimCalibration(void);

// Where a host kernel reaches [ptr, ptr + bytes) of live device memory, or
// NULL when that range is not allocated. Only valid inside a host kernel.
void* lmsSimDeviceBytes(const void* ptr, size_t bytes);

// Under LMS_SIM_SPARSE_DATA=1 (README.md, "Settings") copies, memsets and
// fresh memory's poison touch only the first LMS_SIM_SPARSE_WINDOW bytes of
// every LMS_SIM_SPARSE_STRIDE bytes of their range, counted from its start:
// the bytes a host kernel may rely on in that mode.
#define LMS_SIM_SPARSE_STRIDE ((size_t)1 << 20)
#define LMS_SIM_SPARSE_WINDOW ((size_t)64)

#ifdef __cplusplus
}
#endif
