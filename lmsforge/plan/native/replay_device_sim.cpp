// lms_plan_replay_sim's device: each operator is a host kernel of lmsforge's simulated runtime
// that takes the traced duration in virtual time and reads and writes the sample windows
// through the simulator's device bytes.

#include "replay_device.h"

#include <lms_cuda_sim.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>

static_assert(lms_replay::kSampleStride == LMS_SIM_SPARSE_STRIDE &&
                  lms_replay::kSampleWindow == LMS_SIM_SPARSE_WINDOW,
              "the replay samples what the simulator moves under sparse data");

namespace lms_replay {

struct Device::State {
  std::atomic<int64_t> mismatches{0};
  std::mutex mutex;
  std::string first;
};

namespace {

struct Job {
  OperatorWork work;
  Device::State* state;
};

template <typename Visit>
void for_each_window(size_t bytes, Visit visit) {
  size_t window = 0;
  for (size_t offset = 0; offset + sizeof(uint64_t) <= bytes;
       offset += kSampleStride, ++window) {
    visit(offset, std::min(kSampleWindow, bytes - offset) / sizeof(uint64_t), window);
  }
}

// Visits the sample windows of A as (their bytes on the simulated device, their count of
// words, the window's number); cudaErrorIllegalAddress if one is not device memory.
template <typename Visit>
cudaError_t for_each_sample(const Access& a, Visit visit) {
  cudaError_t fault = cudaSuccess;
  for_each_window(a.bytes, [&](size_t offset, size_t words, size_t window) {
    auto* bytes = fault != cudaSuccess ? nullptr : static_cast<uint8_t*>(lmsSimDeviceBytes(
        static_cast<uint8_t*>(a.data) + offset, words * sizeof(uint64_t)));
    if (bytes == nullptr) {
      fault = cudaErrorIllegalAddress;
      return;
    }
    visit(bytes, words, window);
  });
  return fault;
}

cudaError_t run_job(void* raw) {
  std::unique_ptr<Job> job(*static_cast<Job**>(raw));
  for (const Access& a : job->work.checks) {
    bool bad = false;
    cudaError_t fault = for_each_sample(a, [&](uint8_t* bytes, size_t words, size_t window) {
      uint64_t expected = pattern_word(a.id, a.version, window);
      for (size_t w = 0; w < words; ++w) {
        uint64_t found = 0;
        std::memcpy(&found, bytes + w * sizeof(uint64_t), sizeof(uint64_t));
        bad = bad || found != expected;
      }
    });
    if (fault != cudaSuccess) {
      return fault;
    }
    if (bad && job->state->mismatches.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> lock(job->state->mutex);
      job->state->first = "storage " + std::to_string(a.id) + " read by operator " +
          std::to_string(job->work.op) + " does not hold what its last writer wrote";
    }
  }
  for (const Access& a : job->work.writes) {
    cudaError_t fault = for_each_sample(a, [&](uint8_t* bytes, size_t words, size_t window) {
      uint64_t word = pattern_word(a.id, a.version, window);
      for (size_t w = 0; w < words; ++w) {
        std::memcpy(bytes + w * sizeof(uint64_t), &word, sizeof(uint64_t));
      }
    });
    if (fault != cudaSuccess) {
      return fault;
    }
  }
  return cudaSuccess;
}

} // namespace

Device::Device() : state_(new State) {}

Device::~Device() {
  delete state_;
}

cudaError_t Device::launch(cudaStream_t stream, OperatorWork work, double duration_ns) {
  auto* job = new Job{std::move(work), state_};
  lmsSimKernelWork timing{0, 0, duration_ns};
  cudaError_t status =
      lmsSimLaunchHostKernel(stream, "replayed_operator", run_job, &job, sizeof(job), &timing);
  if (status != cudaSuccess) {
    delete job;
  }
  return status;
}

int64_t Device::mismatches() {
  return state_->mismatches.load();
}

std::string Device::first_mismatch() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->first;
}

bool Device::simulated() {
  return true;
}

const char* Device::calibration() {
  return lmsSimCalibration();
}

} // namespace lms_replay
