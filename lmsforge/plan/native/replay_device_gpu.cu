// lms_plan_replay's device: a GPU. Each operator is one kernel (more when it touches more than
// kMaxAccesses storages) that checks and writes the sample windows of its storages, then spins
// on the GPU's global timer until the traced duration has passed since it began, so that the
// copies LMS makes run beside device time of the trace's length, as beside real kernels.

#include "replay_device.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace lms_replay {

namespace {

constexpr int kMaxAccesses = 32;  // 40 bytes each: the arguments stay far under 4 KiB
constexpr int kThreads = 256;
constexpr size_t kWordsPerWindow = kSampleWindow / sizeof(uint64_t);

struct DeviceAccess {
  uint64_t* words;
  uint64_t bytes;
  int64_t id;
  uint64_t version;
  int write;
};

struct OperatorArgs {
  int64_t op;
  uint64_t duration_ns;
  int count;
  DeviceAccess access[kMaxAccesses];
};

struct Report {
  unsigned long long mismatches;
  int first_set;
  long long first_op;
  long long first_id;
};

__device__ uint64_t global_ns() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// Every thread of the one block takes a share of the windows' words; a read is wrong if any
// word of any window is.
__global__ void replayed_operator(OperatorArgs args, Report* report) {
  __shared__ uint64_t start;
  if (threadIdx.x == 0) {
    start = global_ns();
  }
  __syncthreads();
  for (int pass = 0; pass < 2; ++pass) {  // every check before any write (in-place operators)
    for (int i = 0; i < args.count; ++i) {
      const DeviceAccess a = args.access[i];
      if (a.write != pass) {
        continue;
      }
      uint64_t windows = a.bytes >= sizeof(uint64_t)
          ? (a.bytes - sizeof(uint64_t)) / kSampleStride + 1 : 0;
      int bad = 0;
      for (uint64_t t = threadIdx.x; t < windows * kWordsPerWindow; t += blockDim.x) {
        uint64_t window = t / kWordsPerWindow, word = t % kWordsPerWindow;
        uint64_t offset = window * kSampleStride;
        uint64_t length = (a.bytes - offset < kSampleWindow ? a.bytes - offset : kSampleWindow) /
            sizeof(uint64_t);
        if (word >= length) {
          continue;
        }
        uint64_t* at = a.words + offset / sizeof(uint64_t) + word;
        uint64_t expected = pattern_word(a.id, a.version, window);
        if (a.write) {
          *at = expected;
        } else {
          bad |= *at != expected;
        }
      }
      if (__syncthreads_or(bad) && threadIdx.x == 0) {
        atomicAdd(&report->mismatches, 1ULL);
        if (atomicCAS(&report->first_set, 0, 1) == 0) {
          report->first_op = args.op;
          report->first_id = a.id;
        }
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    while (global_ns() - start < args.duration_ns) {
    }
  }
}

} // namespace

struct Device::State {
  Report* report = nullptr;
};

Device::Device() : state_(new State) {
  // Outside the caching allocator: the replay's own bookkeeping is no storage of the trace.
  cudaError_t status = cudaMalloc(&state_->report, sizeof(Report));
  if (status == cudaSuccess) {
    status = cudaMemset(state_->report, 0, sizeof(Report));
  }
  if (status != cudaSuccess) {
    delete state_;
    throw std::runtime_error(std::string("cannot allocate the replay's report: ") +
                             cudaGetErrorString(status));
  }
}

Device::~Device() {
  cudaFree(state_->report);
  delete state_;
}

cudaError_t Device::launch(cudaStream_t stream, OperatorWork work, double duration_ns) {
  std::vector<DeviceAccess> all;
  for (const Access& a : work.checks) {
    all.push_back({static_cast<uint64_t*>(a.data), a.bytes, a.id, a.version, 0});
  }
  for (const Access& a : work.writes) {
    all.push_back({static_cast<uint64_t*>(a.data), a.bytes, a.id, a.version, 1});
  }
  // Checks go first; only the last launch takes the operator's time (launches on one stream
  // run in order, so the reads of the first ones still see the previous writers' bytes).
  size_t done = 0;
  do {
    OperatorArgs args{};
    args.op = work.op;
    args.count = static_cast<int>(std::min<size_t>(kMaxAccesses, all.size() - done));
    std::copy(all.begin() + done, all.begin() + done + args.count, args.access);
    done += args.count;
    args.duration_ns = done == all.size() ? static_cast<uint64_t>(std::max(duration_ns, 0.0)) : 0;
    replayed_operator<<<1, kThreads, 0, stream>>>(args, state_->report);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) {
      return status;
    }
  } while (done < all.size());
  return cudaSuccess;
}

int64_t Device::mismatches() {
  Report report{};
  cudaError_t status = cudaMemcpy(&report, state_->report, sizeof(report), cudaMemcpyDeviceToHost);
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string("cannot read the replay's report: ") +
                             cudaGetErrorString(status));
  }
  return static_cast<int64_t>(report.mismatches);
}

std::string Device::first_mismatch() {
  Report report{};
  if (cudaMemcpy(&report, state_->report, sizeof(report), cudaMemcpyDeviceToHost) !=
          cudaSuccess || report.first_set == 0) {
    return "";
  }
  return "storage " + std::to_string(report.first_id) + " read by operator " +
      std::to_string(report.first_op) + " does not hold what its last writer wrote";
}

bool Device::simulated() {
  return false;
}

const char* Device::calibration() {
  return nullptr;
}

} // namespace lms_replay
