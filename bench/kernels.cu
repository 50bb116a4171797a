#include "kernels.h"
#include "pattern.h"

namespace lms_bench {

namespace {

constexpr int kThreads = 256;

// Enough blocks to fill any current GPU; the loops stride over the rest.
unsigned int blocks_for(size_t count) {
  size_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

__global__ void fill_pattern_kernel(uint32_t* words, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    words[i] = pattern_word(seed, i);
  }
}

__global__ void count_mismatches_kernel(const uint32_t* words, size_t count, uint32_t seed,
                                        unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    local += words[i] != pattern_word(seed, i) ? 1 : 0;
  }
  if (local != 0) {
    atomicAdd(mismatches, local);
  }
}

__global__ void forward_kernel(const uint32_t* in, uint32_t* out, size_t count, int layer,
                               int rounds) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = in != nullptr ? in[i] : input_word(i);
    out[i] = forward_word(x, layer, rounds);
  }
}

__global__ void init_grad_kernel(uint32_t* grad, size_t count) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    grad[i] = grad_init_word(i);
  }
}

__global__ void backward_kernel(const uint32_t* activation, uint32_t* grad, size_t count,
                                int rounds) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count;
       i += size_t(gridDim.x) * blockDim.x) {
    grad[i] = backward_word(grad[i], activation[i], rounds);
  }
}

} // namespace

cudaError_t fill_pattern(uint32_t* words, size_t count, uint32_t seed, cudaStream_t stream) {
  fill_pattern_kernel<<<blocks_for(count), kThreads, 0, stream>>>(words, count, seed);
  return cudaGetLastError();
}

cudaError_t count_mismatches(const uint32_t* words, size_t count, uint32_t seed,
                             unsigned long long* mismatches, cudaStream_t stream) {
  count_mismatches_kernel<<<blocks_for(count), kThreads, 0, stream>>>(words, count, seed,
                                                                      mismatches);
  return cudaGetLastError();
}

cudaError_t forward_layer(const uint32_t* in, uint32_t* out, size_t count, int layer,
                          Mixing mixing, cudaStream_t stream) {
  forward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(in, out, count, layer,
                                                             mixing.data_rounds);
  return cudaGetLastError();
}

cudaError_t init_grad(uint32_t* grad, size_t count, cudaStream_t stream) {
  init_grad_kernel<<<blocks_for(count), kThreads, 0, stream>>>(grad, count);
  return cudaGetLastError();
}

cudaError_t backward_layer(const uint32_t* activation, uint32_t* grad, size_t count,
                           Mixing mixing, cudaStream_t stream) {
  backward_kernel<<<blocks_for(count), kThreads, 0, stream>>>(activation, grad, count,
                                                              mixing.data_rounds);
  return cudaGetLastError();
}

const char* simulated_calibration() {
  return nullptr;
}

} // namespace lms_bench
