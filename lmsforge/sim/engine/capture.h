#pragma once

// Stream capture (cudaStreamBeginCapture .. cudaStreamEndCapture): work sent
// to a capturing stream is recorded as graph nodes instead of running;
// events recorded there fork the capture into other streams that wait on
// them, and every fork must be joined back before the capture ends. The
// calls a capture forbids fail with the codes CUDA uses and invalidate it:
// synchronising or querying a capturing stream, querying an event recorded
// in a capture, using the legacy stream beside a capturing blocking stream,
// and the "potentially unsafe" calls (cudaMalloc, cudaEventQuery, ...) while
// the thread's capture mode forbids them.

#include "event.h"
#include "stream.h"

#include "status.h"

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lms_sim {

struct CaptureNode {
  Op op;
  std::vector<size_t> deps;  // indices of earlier nodes
};

struct CaptureSession {
  uint64_t id = 0;
  CaptureMode mode = kCaptureModeGlobal;
  std::thread::id thread;
  StreamRef origin;
  bool invalidated = false;
  std::vector<CaptureNode> nodes;
  std::vector<StreamRef> members;  // the origin and every stream that joined
};

class Captures {
 public:
  static Captures& get();

  // Guards every stream's `capture` and `frontier`, the sessions, and the
  // capture fields of events. Lock order: this, then an event's mutex, then
  // a device's ordering mutex, then a stream's.
  std::mutex& mutex() { return mutex_; }

  Status begin(const StreamRef& stream, CaptureMode mode);
  // Ends the capture begun on `stream`; the recorded work in topological
  // order on success.
  Status end(const StreamRef& stream, std::vector<CaptureNode>* nodes);

  // With mutex() held, for a capturing stream:
  Status record_locked(const StreamRef& stream, Op op);
  void record_event_locked(const StreamRef& stream, EventState& event);
  Status wait_event_locked(const StreamRef& stream, EventState& event);
  // Use of the legacy stream of `device` while one of its blocking streams
  // captures.
  Status check_legacy_locked(int device);
  void invalidate_locked(CaptureSession& session, const std::string& why);

  // A potentially unsafe call (see cudaThreadExchangeStreamCaptureMode).
  Status check_unsafe(const char* function);
  Status status(const StreamRef& stream, CaptureStatus* status,
                     unsigned long long* id);
  CaptureMode exchange_mode(CaptureMode mode);
  bool capturing(const StreamRef& stream);

 private:
  std::mutex mutex_;
  std::vector<std::shared_ptr<CaptureSession>> active_;
  uint64_t next_id_ = 1;
};

} // namespace lms_sim

// What cudaStreamEndCapture returns and cudaGraphInstantiate makes runnable.
struct CUgraph_st {
  std::vector<lms_sim::CaptureNode> nodes;
};

struct CUgraphExec_st {
  std::vector<lms_sim::Op> ops;  // in an order that respects every edge
};
