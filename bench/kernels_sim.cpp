// The benchmark kernels (kernels.h) for lmsforge's simulated CUDA runtime:
// the same data effect as kernels.cu, computed on the host by the simulated
// device's stream worker (lmsforge/sim/include/lms_cuda_sim.h),
// and what each would do on the GPU, which sets its duration in the
// simulator's virtual time: bytes of device memory it moves and 32-bit integer
// ALU operations it executes.
//
// The operation counts are those of the SASS that nvcc 13.0 makes of
// kernels.cu for sm_90 (cuobjdump -sass): a mixing round is 3 SHF, 3 LOP3
// and 1 IADD3 on the ALU pipe (its 2 IMADs issue to the FMA pipe, beside
// them), and the 4-times unrolled loop adds a VIADD and an ISETP per 4 rounds:
// 7.5 per round. Around the rounds, about 10 per element (index, address,
// bounds); a pattern word is 17.

#include "kernels.h"
#include "pattern.h"

#include <lms_cuda_sim.h>

#include <algorithm>
#include <cstring>

namespace lms_bench {

namespace {

constexpr double kAluOpsPerRound = 7.5;
constexpr double kAluOpsPerElement = 10;
constexpr double kAluOpsPerPatternWord = 17;
// Elements mixed together: independent lanes the host compiler can vectorise
// (the GPU runs them as threads); one element at a time is a chain of
// dependent multiplies, several times slower on the host.
constexpr size_t kLanes = 1024;

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

// forward_word() of every element, kLanes at a time.
cudaError_t forward_host(void* raw) {
  auto* a = static_cast<ForwardArgs*>(raw);
  const uint32_t* in = a->in != nullptr ? bytes_of<const uint32_t>(a->in, a->count) : nullptr;
  uint32_t* out = bytes_of<uint32_t>(a->out, a->count);
  if (out == nullptr || (a->in != nullptr && in == nullptr)) {
    return cudaErrorIllegalAddress;
  }
  const uint32_t offset = static_cast<uint32_t>(a->layer) * 0x85ebca6bU;
  uint32_t x[kLanes];
  for (size_t first = 0; first < a->count; first += kLanes) {
    size_t lanes = std::min(kLanes, a->count - first);
    for (size_t j = 0; j < lanes; ++j) {
      x[j] = (in != nullptr ? in[first + j] : input_word(first + j)) + offset;
    }
    for (int r = 0; r < a->rounds; ++r) {
      for (size_t j = 0; j < lanes; ++j) {
        x[j] = mix32(x[j] + static_cast<uint32_t>(r));
      }
    }
    std::memcpy(out + first, x, lanes * sizeof(uint32_t));
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

// backward_word() of every element, kLanes at a time.
cudaError_t backward_host(void* raw) {
  auto* a = static_cast<BackwardArgs*>(raw);
  const uint32_t* activation = bytes_of<const uint32_t>(a->activation, a->count);
  uint32_t* grad = bytes_of<uint32_t>(a->grad, a->count);
  if (activation == nullptr || grad == nullptr) {
    return cudaErrorIllegalAddress;
  }
  uint32_t x[kLanes];
  for (size_t first = 0; first < a->count; first += kLanes) {
    size_t lanes = std::min(kLanes, a->count - first);
    for (size_t j = 0; j < lanes; ++j) {
      x[j] = grad[first + j] ^ activation[first + j];
    }
    for (int r = 0; r < a->rounds; ++r) {
      for (size_t j = 0; j < lanes; ++j) {
        x[j] = mix32(x[j] ^ static_cast<uint32_t>(r));
      }
    }
    std::memcpy(grad + first, x, lanes * sizeof(uint32_t));
  }
  return cudaSuccess;
}

// What a kernel over `count` words does on the GPU.
lmsSimKernelWork work(size_t count, double words_moved, double alu_ops_per_element) {
  double elements = static_cast<double>(count);
  return lmsSimKernelWork{elements * words_moved * sizeof(uint32_t),
                          elements * alu_ops_per_element, 0};
}

double mixing_ops(int rounds) {
  return kAluOpsPerElement + kAluOpsPerRound * rounds;
}

template <typename Args>
cudaError_t launch(cudaStream_t stream, const char* name, lmsSimKernelFn fn, const Args& args,
                   const lmsSimKernelWork& work) {
  return lmsSimLaunchHostKernel(stream, name, fn, &args, sizeof(args), &work);
}

} // namespace

cudaError_t fill_pattern(uint32_t* words, size_t count, uint32_t seed, cudaStream_t stream) {
  return launch(stream, "fill_pattern", fill_pattern_host, FillArgs{words, count, seed},
                work(count, 1, kAluOpsPerPatternWord));
}

cudaError_t count_mismatches(const uint32_t* words, size_t count, uint32_t seed,
                             unsigned long long* mismatches, cudaStream_t stream) {
  return launch(stream, "count_mismatches", count_mismatches_host,
                MismatchArgs{words, count, seed, mismatches},
                work(count, 1, kAluOpsPerPatternWord + 3));
}

cudaError_t forward_layer(const uint32_t* in, uint32_t* out, size_t count, int layer,
                          Mixing mixing, cudaStream_t stream) {
  double input_ops = in != nullptr ? 0 : kAluOpsPerPatternWord;
  return launch(stream, "forward_layer", forward_host,
                ForwardArgs{in, out, count, layer, mixing.data_rounds},
                work(count, in != nullptr ? 2 : 1, mixing_ops(mixing.rounds) + input_ops));
}

cudaError_t init_grad(uint32_t* grad, size_t count, cudaStream_t stream) {
  return launch(stream, "init_grad", init_grad_host, GradArgs{grad, count},
                work(count, 1, kAluOpsPerPatternWord));
}

cudaError_t backward_layer(const uint32_t* activation, uint32_t* grad, size_t count,
                           Mixing mixing, cudaStream_t stream) {
  return launch(stream, "backward_layer", backward_host,
                BackwardArgs{activation, grad, count, mixing.data_rounds},
                work(count, 3, mixing_ops(mixing.rounds)));
}

const char* simulated_calibration() {
  return lmsSimCalibration();
}

} // namespace lms_bench
