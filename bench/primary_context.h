#pragma once

namespace lms_bench {

// Registers c10's primary-context query, as ATen does at its CUDA
// initialisation (aten/src/ATen/cuda/detail/CUDAHooks.cpp). A program that
// links c10_cuda without ATen must do it itself: otherwise c10's device guard
// aborts with "Should never been called" the first time it restores a device
// (both benchmarks did on the H100, docs/gpu.md). Backed by the driver's
// cuDevicePrimaryCtxGetState, reached through the runtime.
void register_primary_context_query();

} // namespace lms_bench
