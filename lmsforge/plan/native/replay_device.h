#pragma once

// What a replayed operator does on the device, for lms_plan_replay_sim (lmsforge's simulated
// CUDA runtime, replay_device_sim.cpp) and lms_plan_replay (a GPU, replay_device_gpu.cu): take
// the traced duration, check every read storage's sample windows against the pattern its last
// writer left, and write a new pattern into every written one. replay.cpp sees only this.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define LMS_REPLAY_HOST_DEVICE __host__ __device__
#else
#define LMS_REPLAY_HOST_DEVICE
#endif

namespace lms_replay {

// The windows checked and written: the first kSampleWindow bytes of every kSampleStride bytes of
// a storage, from its start (the simulator moves only those under sparse data; a GPU moves
// everything, and the samples stand for the whole), whole 8-byte words of them.
constexpr size_t kSampleStride = size_t{1} << 20;
constexpr size_t kSampleWindow = 64;

// The contents a storage's writer leaves in its sample windows: a word per window that depends
// on the storage, how often it was written and the window, so that another storage's bytes, an
// older version or poison never pass for it.
LMS_REPLAY_HOST_DEVICE inline uint64_t pattern_word(int64_t id, uint64_t version,
                                                    size_t window) {
  uint64_t x = static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ULL ^
      version * 0xbf58476d1ce4e5b9ULL ^ (window + 1) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  x *= 0xd6e8feb86659fd3dULL;
  return (x ^ (x >> 29)) | 1;  // never zero: fresh host pages are
}

struct Access {
  void* data;
  size_t bytes;
  int64_t id;
  uint64_t version;  // expected for a check, left by a write
};

struct OperatorWork {
  int64_t op;  // -1: the replay's own writes and checks, outside the trace
  std::vector<Access> checks, writes;
};

// The device side of one replay on the current device.
class Device {
 public:
  struct State;  // each backend's own

  Device();
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Enqueues WORK on STREAM, taking DURATION_NS of device time (the checks and writes
  // included); returns the launch's error.
  cudaError_t launch(cudaStream_t stream, OperatorWork work, double duration_ns);

  // Reads seen not to hold what their last writer wrote, up to the last synchronisation, and
  // the first of them in words.
  int64_t mismatches();
  std::string first_mismatch();

  // Whether the times are virtual (the simulated runtime) and, if so, its calibration table.
  static bool simulated();
  static const char* calibration();

 private:
  State* state_;
};

} // namespace lms_replay
