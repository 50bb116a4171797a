#pragma once

// The data the benchmarks write and check, computed the same way on the host
// and on the device so that the host can check any element it samples.

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define LMS_BENCH_HD __host__ __device__
#else
#define LMS_BENCH_HD
#endif

namespace lms_bench {

// A bijective 32-bit mixer (lowbias32): neighbouring inputs give unrelated
// outputs, so a copy that lands at the wrong offset never matches.
LMS_BENCH_HD inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Word `index` of the buffer filled with `seed`; never constant over a buffer.
LMS_BENCH_HD inline uint32_t pattern_word(uint32_t seed, size_t index) {
  return mix32(seed * 0x9e3779b9U ^ mix32(static_cast<uint32_t>(index)) ^
               static_cast<uint32_t>(static_cast<uint64_t>(index) >> 32));
}

// One layer of the synthetic network: `rounds` dependent integer mixing
// steps per element (integers, so host and device agree bit for bit).
LMS_BENCH_HD inline uint32_t forward_word(uint32_t input, int layer, int rounds) {
  uint32_t x = input + static_cast<uint32_t>(layer) * 0x85ebca6bU;
  for (int r = 0; r < rounds; ++r) {
    x = mix32(x + static_cast<uint32_t>(r));
  }
  return x;
}

LMS_BENCH_HD inline uint32_t backward_word(uint32_t grad, uint32_t activation, int rounds) {
  uint32_t x = grad ^ activation;
  for (int r = 0; r < rounds; ++r) {
    x = mix32(x ^ static_cast<uint32_t>(r));
  }
  return x;
}

// The input of layer 0 and the initial gradient.
LMS_BENCH_HD inline uint32_t input_word(size_t index) {
  return pattern_word(0x1234567U, index);
}
LMS_BENCH_HD inline uint32_t grad_init_word(size_t index) {
  return pattern_word(0x7654321U, index);
}

} // namespace lms_bench
