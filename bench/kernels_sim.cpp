// The benchmark kernels (kernels.h) for lmsforge's simulated CUDA runtime:
// the same data effect as kernels.cu, computed on the host by the simulated
// device's stream worker (lmsforge/verify/cuda_sim/include/lms_cuda_sim.h).

#include "kernels.h"
#include "pattern.h"

#include <lms_cuda_sim.h>

#include <cstring>

namespace lms_bench {

namespace {

template <typename T>
T* bytes_of(const void* device, size_t count) {
  return static_cast<T*>(lmsSimDeviceBytes(device, count * sizeof(T)));
}

struct FillArgs {
  uint32_t* words;
  size_t count;
  uint32_t seed;
};

cudaError_t fill_pattern_host(void* raw) {
  auto* a = static_cast<FillArgs*>(raw);
  uint32_t* words = bytes_of<uint32_t>(a->words, a->count);
  if (words == nullptr) {
    return cudaErrorIllegalAddress;
  }
  for (size_t i = 0; i < a->count; ++i) {
    words[i] = pattern_word(a->seed, i);
  }
  return cudaSuccess;
}

struct MismatchArgs {
  const uint32_t* words;
  size_t count;
  uint32_t seed;
  unsigned long long* mismatches;
};

cudaError_t count_mismatches_host(void* raw) {
  auto* a = static_cast<MismatchArgs*>(raw);
  const uint32_t* words = bytes_of<const uint32_t>(a->words, a->count);
  auto* counter = bytes_of<unsigned long long>(a->mismatches, 1);
  if (words == nullptr || counter == nullptr) {
    return cudaErrorIllegalAddress;
  }
  unsigned long long found = 0;
  for (size_t i = 0; i < a->count; ++i) {
    found += words[i] != pattern_word(a->seed, i) ? 1 : 0;
  }
  __atomic_fetch_add(counter, found, __ATOMIC_SEQ_CST);
  return cudaSuccess;
}

struct ForwardArgs {
  const uint32_t* in;
  uint32_t* out;
  size_t count;
  int layer;
  int rounds;
};

cudaError_t forward_host(void* raw) {
  auto* a = static_cast<ForwardArgs*>(raw);
  const uint32_t* in = a->in != nullptr ? bytes_of<const uint32_t>(a->in, a->count) : nullptr;
  uint32_t* out = bytes_of<uint32_t>(a->out, a->count);
  if (out == nullptr || (a->in != nullptr && in == nullptr)) {
    return cudaErrorIllegalAddress;
  }
  for (size_t i = 0; i < a->count; ++i) {
    out[i] = forward_word(in != nullptr ? in[i] : input_word(i), a->layer, a->rounds);
  }
  return cudaSuccess;
}

struct GradArgs {
  uint32_t* grad;
  size_t count;
};

cudaError_t init_grad_host(void* raw) {
  auto* a = static_cast<GradArgs*>(raw);
  uint32_t* grad = bytes_of<uint32_t>(a->grad, a->count);
  if (grad == nullptr) {
    return cudaErrorIllegalAddress;
  }
  for (size_t i = 0; i < a->count; ++i) {
    grad[i] = grad_init_word(i);
  }
  return cudaSuccess;
}

struct BackwardArgs {
  const uint32_t* activation;
  uint32_t* grad;
  size_t count;
  int rounds;
};

cudaError_t backward_host(void* raw) {
  auto* a = static_cast<BackwardArgs*>(raw);
  const uint32_t* activation = bytes_of<const uint32_t>(a->activation, a->count);
  uint32_t* grad = bytes_of<uint32_t>(a->grad, a->count);
  if (activation == nullptr || grad == nullptr) {
    return cudaErrorIllegalAddress;
  }
  for (size_t i = 0; i < a->count; ++i) {
    grad[i] = backward_word(grad[i], activation[i], a->rounds);
  }
  return cudaSuccess;
}

template <typename Args>
cudaError_t launch(cudaStream_t stream, const char* name, lmsSimKernelFn fn, const Args& args) {
  return lmsSimLaunchHostKernel(stream, name, fn, &args, sizeof(args));
}

} // namespace

cudaError_t fill_pattern(uint32_t* words, size_t count, uint32_t seed, cudaStream_t stream) {
  return launch(stream, "fill_pattern", fill_pattern_host, FillArgs{words, count, seed});
}

cudaError_t count_mismatches(const uint32_t* words, size_t count, uint32_t seed,
                             unsigned long long* mismatches, cudaStream_t stream) {
  return launch(stream, "count_mismatches", count_mismatches_host,
                MismatchArgs{words, count, seed, mismatches});
}

cudaError_t forward_layer(const uint32_t* in, uint32_t* out, size_t count, int layer, int rounds,
                          cudaStream_t stream) {
  return launch(stream, "forward_layer", forward_host,
                ForwardArgs{in, out, count, layer, rounds});
}

cudaError_t init_grad(uint32_t* grad, size_t count, cudaStream_t stream) {
  return launch(stream, "init_grad", init_grad_host, GradArgs{grad, count});
}

cudaError_t backward_layer(const uint32_t* activation, uint32_t* grad, size_t count, int rounds,
                           cudaStream_t stream) {
  return launch(stream, "backward_layer", backward_host,
                BackwardArgs{activation, grad, count, rounds});
}

} // namespace lms_bench
