#pragma once

// Device kernels of the benchmarks, callable from host code compiled without
// nvcc. Each launcher checks the launch and returns its error; none waits.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace lms_bench {

// words[i] = pattern_word(seed, i) for i < count.
cudaError_t fill_pattern(uint32_t* words, size_t count, uint32_t seed, cudaStream_t stream);

// Adds to *mismatches the number of i < count with words[i] != pattern_word(seed, i).
cudaError_t count_mismatches(const uint32_t* words, size_t count, uint32_t seed,
                             unsigned long long* mismatches, cudaStream_t stream);

// out[i] = forward_word(in ? in[i] : input_word(i), layer, rounds).
cudaError_t forward_layer(const uint32_t* in, uint32_t* out, size_t count, int layer, int rounds,
                          cudaStream_t stream);

// grad[i] = grad_init_word(i).
cudaError_t init_grad(uint32_t* grad, size_t count, cudaStream_t stream);

// grad[i] = backward_word(grad[i], activation[i], rounds).
cudaError_t backward_layer(const uint32_t* activation, uint32_t* grad, size_t count, int rounds,
                           cudaStream_t stream);

} // namespace lms_bench
