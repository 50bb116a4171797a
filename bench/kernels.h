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

// Mixing rounds per element of a layer. `rounds` is the compute per byte the
// benchmark asks for; the data holds `data_rounds` of them. On a GPU the two
// are equal. On lmsforge's simulated runtime the host computes `data_rounds`
// while the simulated device takes the time of `rounds` (kernels_sim.cpp), so
// that a short run keeps a GPU's balance of compute and copies yet takes
// seconds of host time; the data checks use `data_rounds`.
struct Mixing {
  int rounds;
  int data_rounds;
};

// out[i] = forward_word(in ? in[i] : input_word(i), layer, mixing.data_rounds).
cudaError_t forward_layer(const uint32_t* in, uint32_t* out, size_t count, int layer,
                          Mixing mixing, cudaStream_t stream);

// grad[i] = grad_init_word(i).
cudaError_t init_grad(uint32_t* grad, size_t count, cudaStream_t stream);

// grad[i] = backward_word(grad[i], activation[i], mixing.data_rounds).
cudaError_t backward_layer(const uint32_t* activation, uint32_t* grad, size_t count,
                           Mixing mixing, cudaStream_t stream);

// The calibration table the simulated runtime times with, as a JSON object;
// nullptr on a GPU, where CUDA events time the device itself.
const char* simulated_calibration();

} // namespace lms_bench
