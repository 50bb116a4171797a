#pragma once

// Events mark a position in a stream (cudaEventRecord); queries, waits and
// elapsed times look at the most recent record only, as CUDA defines them.

#include "stream.h"

#include <memory>
#include <mutex>
#include <vector>

namespace lms_sim {

struct EventState {
  EventState(int device_, unsigned flags_) : device(device_), flags(flags_) {}
  const int device;
  const unsigned flags;

  std::mutex mutex;
  // The last record outside capture; no stream means never recorded, which
  // CUDA treats as complete.
  StreamRef stream;
  uint64_t position = 0;
  std::shared_ptr<Timestamp> stamp;
  // The last record inside a capture (then the event is a "captured event").
  std::shared_ptr<CaptureSession> capture;
  std::vector<size_t> capture_nodes;
};

} // namespace lms_sim

struct CUevent_st {
  std::shared_ptr<lms_sim::EventState> state;
};
