#pragma once

// Streams: in-order queues of operations, each executed by a worker thread of
// its own, so that streams run concurrently as on a GPU. An operation may
// wait for positions in other streams (events, the legacy stream's implicit
// synchronisation); positions are sequence numbers that only grow.
//
// In adversarial mode (a seed) every worker delays work by seeded random
// amounts before starting it, which reorders work across streams (never
// within one) and makes a missing wait show up as wrong data.

#include "timing.h"

#include "status.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lms_sim {

// splitmix64: small, seedable, the same sequence on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();  // [0, 1)
  uint64_t below(uint64_t bound);

 private:
  uint64_t state_;
};

// What an adversarial worker waits before starting an operation.
std::chrono::microseconds pick_delay(Rng& rng);

class StreamState;
struct CaptureSession;
using StreamRef = std::shared_ptr<StreamState>;

struct Dependency {
  StreamRef stream;
  uint64_t position;
};

enum class OpKind { kCopy, kMemset, kKernel, kHostFunc, kMarker };

struct ExecContext {
  Rng& rng;
};

// A marker an event records or a host wait watches: whether the stream
// really reached it, and when it does in virtual time (timing.h).
struct Timestamp {
  std::atomic<bool> reached{false};
  VirtualNs virtual_end = 0;  // set when the operation is appended
};

struct Op {
  OpKind kind = OpKind::kMarker;
  std::string what;  // for faults and traces: "cudaMemcpyAsync 16 MiB device->host"
  int device = 0;    // whose memory a fault is reported against
  // The work; returns kErrorIllegalAddress when it touched memory that is
  // not allocated (a fault). Empty for markers.
  std::function<Status(ExecContext&)> body;
  std::vector<Dependency> waits;
  std::shared_ptr<Timestamp> stamp;  // event records
  // Virtual time: what the operation occupies, the earliest it may start
  // (the ends of everything it waits for, whether or not they really ended
  // yet), and when it runs, set when it is appended.
  Work work;
  VirtualNs not_before = 0;
  VirtualNs virtual_start = 0;
  VirtualNs virtual_end = 0;
};

// A stream position and when it is reached in virtual time.
struct Position {
  uint64_t index = 0;
  VirtualNs end = 0;
};

enum class StreamKind { kLegacy, kPerThread, kCreated };

// Host threads waiting for any stream position use one condition variable.
class Progress {
 public:
  static Progress& instance();
  // Waits until `done()` holds.
  void wait(const std::function<bool()>& done);
  void notify();

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
};

class StreamState {
 public:
  StreamState(int device, StreamKind kind, unsigned flags, int priority);

  const int device;
  const StreamKind kind;
  const unsigned flags;
  const int priority;
  const uint64_t id;

  // Synchronises with the legacy stream (created without kStreamNonBlocking).
  bool blocking() const;

  // Appends an operation and schedules it in virtual time; returns its position.
  Position push(Op op);
  // The position of the last operation appended.
  Position tail();
  bool reached(uint64_t position) const {
    return completed_.load(std::memory_order_acquire) >= position;
  }
  bool idle() { return reached(tail().index); }
  // The worker leaves once the queue is empty (cudaStreamDestroy).
  void retire();

  // Graph capture (capture.h), guarded by the capture registry's mutex: the
  // sequence this stream records into, and the nodes its next operation
  // depends on.
  std::shared_ptr<CaptureSession> capture;
  std::vector<size_t> frontier;

 private:
  static void run_worker(StreamRef self);
  void execute(Op& op);

  std::mutex mutex_;
  std::condition_variable work_;
  std::deque<Op> queue_;
  uint64_t appended_ = 0;
  VirtualNs virtual_tail_ = 0;  // when the last operation appended ends
  std::atomic<uint64_t> completed_{0};
  bool worker_started_ = false;
  bool retired_ = false;
  Rng rng_;
  std::weak_ptr<StreamState> self_;

  friend StreamRef make_stream(int, StreamKind, unsigned, int);
};

StreamRef make_stream(int device, StreamKind kind, unsigned flags, int priority);

// True on a thread that is running a host function (cudaLaunchHostFunc),
// where CUDA calls are not permitted.
bool in_host_function();

} // namespace lms_sim
