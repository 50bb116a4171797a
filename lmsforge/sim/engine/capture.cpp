#include "capture.h"

#include "errors.h"
#include "state.h"

#include <algorithm>
#include <set>

namespace lms_sim {

namespace {

thread_local CaptureMode thread_mode = kCaptureModeGlobal;

void merge(std::vector<size_t>& into, const std::vector<size_t>& from) {
  for (size_t node : from) {
    if (std::find(into.begin(), into.end(), node) == into.end()) {
      into.push_back(node);
    }
  }
}

} // namespace

Captures& Captures::get() {
  static auto* captures = new Captures();  // leaked: used during static destruction
  return *captures;
}

Status Captures::begin(const StreamRef& stream, CaptureMode mode) {
  if (mode != kCaptureModeGlobal && mode != kCaptureModeThreadLocal &&
      mode != kCaptureModeRelaxed) {
    return kErrorInvalidValue;
  }
  if (stream->kind == StreamKind::kLegacy) {
    return kErrorStreamCaptureUnsupported;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  if (stream->capture) {
    return kErrorIllegalState;
  }
  auto session = std::make_shared<CaptureSession>();
  session->id = next_id_++;
  session->mode = mode;
  session->thread = std::this_thread::get_id();
  session->origin = stream;
  session->members.push_back(stream);
  stream->capture = session;
  stream->frontier.clear();
  active_.push_back(session);
  return kSuccess;
}

Status Captures::end(const StreamRef& stream, std::vector<CaptureNode>* nodes) {
  std::lock_guard<std::mutex> guard(mutex_);
  std::shared_ptr<CaptureSession> session = stream->capture;
  if (!session) {
    return kErrorIllegalState;
  }
  if (session->origin != stream) {
    invalidate_locked(*session, "cudaStreamEndCapture on a stream that joined the capture");
    return kErrorStreamCaptureUnmatched;
  }
  if (session->mode != kCaptureModeRelaxed &&
      session->thread != std::this_thread::get_id()) {
    return kErrorStreamCaptureWrongThread;
  }
  // Every fork must be joined: the last node of each member stream must be an
  // ancestor of (or be) a node the origin stream depends on now.
  std::set<size_t> joined;
  std::vector<size_t> pending = stream->frontier;
  while (!pending.empty()) {
    size_t node = pending.back();
    pending.pop_back();
    if (joined.insert(node).second) {
      for (size_t dep : session->nodes[node].deps) {
        pending.push_back(dep);
      }
    }
  }
  bool unjoined = false;
  for (const StreamRef& member : session->members) {
    for (size_t node : member->frontier) {
      unjoined = unjoined || joined.count(node) == 0;
    }
    member->capture.reset();
    member->frontier.clear();
  }
  active_.erase(std::remove(active_.begin(), active_.end(), session), active_.end());
  if (session->invalidated) {
    return kErrorStreamCaptureInvalidated;
  }
  if (unjoined) {
    return kErrorStreamCaptureUnjoined;
  }
  *nodes = std::move(session->nodes);
  return kSuccess;
}

Status Captures::record_locked(const StreamRef& stream, Op op) {
  CaptureSession& session = *stream->capture;
  if (session.invalidated) {
    return kErrorStreamCaptureInvalidated;
  }
  session.nodes.push_back(CaptureNode{std::move(op), stream->frontier});
  stream->frontier = {session.nodes.size() - 1};
  return kSuccess;
}

void Captures::record_event_locked(const StreamRef& stream, EventState& event) {
  std::lock_guard<std::mutex> guard(event.mutex);
  event.capture = stream->capture;
  event.capture_nodes = stream->frontier;
}

Status Captures::wait_event_locked(const StreamRef& stream, EventState& event) {
  std::shared_ptr<CaptureSession> recorded_in;
  std::vector<size_t> nodes;
  {
    std::lock_guard<std::mutex> guard(event.mutex);
    recorded_in = event.capture;
    nodes = event.capture_nodes;
  }
  bool still_capturing = recorded_in &&
      std::find(active_.begin(), active_.end(), recorded_in) != active_.end();
  if (recorded_in && !still_capturing) {
    return kErrorCapturedEvent;
  }
  if (!recorded_in) {
    // An event of ordinary work: a capturing stream may not depend on it.
    if (stream->capture) {
      invalidate_locked(*stream->capture, "a wait on an event recorded outside the capture");
      return kErrorStreamCaptureIsolation;
    }
    return kSuccess;  // the caller appends an ordinary wait
  }
  if (!stream->capture) {
    // Fork: this stream joins the capture after the event's nodes.
    stream->capture = recorded_in;
    stream->frontier = nodes;
    recorded_in->members.push_back(stream);
    return kSuccess;
  }
  if (stream->capture != recorded_in) {
    invalidate_locked(*stream->capture, "a wait joining two captures");
    invalidate_locked(*recorded_in, "a wait joining two captures");
    return kErrorStreamCaptureMerge;
  }
  merge(stream->frontier, nodes);
  return kSuccess;
}

Status Captures::check_legacy_locked(int device) {
  Status status = kSuccess;
  for (const auto& session : active_) {
    for (const StreamRef& member : session->members) {
      if (member->device == device && member->blocking()) {
        invalidate_locked(*session, "the legacy stream was used beside a capturing blocking "
                                    "stream");
        status = kErrorStreamCaptureImplicit;
        break;
      }
    }
  }
  return status;
}

void Captures::invalidate_locked(CaptureSession& session, const std::string& why) {
  if (!session.invalidated) {
    session.invalidated = true;
    report("capture " + std::to_string(session.id) + " invalidated: " + why);
  }
}

Status Captures::check_unsafe(const char* function) {
  if (thread_mode == kCaptureModeRelaxed) {
    return kSuccess;
  }
  std::lock_guard<std::mutex> guard(mutex_);
  Status status = kSuccess;
  for (const auto& session : active_) {
    bool mine = session->thread == std::this_thread::get_id();
    bool forbids = mine ? session->mode != kCaptureModeRelaxed
                        : thread_mode == kCaptureModeGlobal &&
                              session->mode == kCaptureModeGlobal;
    if (forbids) {
      invalidate_locked(*session, std::string(function) + " was called during the capture");
      status = kErrorStreamCaptureUnsupported;
    }
  }
  return status;
}

Status Captures::status(const StreamRef& stream, CaptureStatus* status,
                             unsigned long long* id) {
  std::lock_guard<std::mutex> guard(mutex_);
  if (stream->kind == StreamKind::kLegacy) {
    for (const auto& session : active_) {
      for (const StreamRef& member : session->members) {
        if (member->device == stream->device && member->blocking()) {
          return kErrorStreamCaptureImplicit;
        }
      }
    }
  }
  if (!stream->capture) {
    *status = kCaptureStatusNone;
    return kSuccess;
  }
  *status = stream->capture->invalidated ? kCaptureStatusInvalidated
                                         : kCaptureStatusActive;
  if (id != nullptr) {
    *id = stream->capture->id;
  }
  return kSuccess;
}

CaptureMode Captures::exchange_mode(CaptureMode mode) {
  CaptureMode previous = thread_mode;
  thread_mode = mode;
  return previous;
}

bool Captures::capturing(const StreamRef& stream) {
  std::lock_guard<std::mutex> guard(mutex_);
  return static_cast<bool>(stream->capture);
}

} // namespace lms_sim
