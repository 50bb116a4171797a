#include "state.h"

#include "capture.h"
#include "errors.h"
#include "settings.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lms_sim {

namespace {

thread_local int thread_device = 0;
// The calling thread's per-thread default stream of each device.
thread_local std::vector<StreamRef> thread_streams;

thread_local const char* thread_call = nullptr;
// API calls this thread made, and the number of its last one that was a query
// finding work not done (LMS_SIM_POLL_CLOCK).
thread_local uint64_t thread_calls = 0;
thread_local uint64_t thread_not_ready_query = 0;

void prune(std::vector<std::weak_ptr<StreamState>>& streams) {
  streams.erase(std::remove_if(streams.begin(), streams.end(),
                               [](const std::weak_ptr<StreamState>& s) { return s.expired(); }),
                streams.end());
}

std::string address(const void* handle) {
  char text[32];
  std::snprintf(text, sizeof(text), "%p", handle);
  return text;
}

[[noreturn]] void destroyed_handle(const std::string& what) {
  const char* call = current_call();
  report(std::string(call != nullptr ? call : "a CUDA call") + " on " + what +
         ", destroyed earlier: undefined behaviour on a GPU (a crash there)");
  std::abort();
}

} // namespace

const char* current_call() {
  return thread_call;
}

void set_current_call(const char* call) {
  thread_call = call;
}

namespace {
// Set by the first runtime call of the process: on a GPU that call has
// initialised the driver too (runtime_called).
std::atomic<bool> any_runtime_call{false};
} // namespace

void count_api_call() {
  ++thread_calls;
  if (!any_runtime_call.load(std::memory_order_relaxed)) {
    any_runtime_call.store(true, std::memory_order_relaxed);
  }
}

bool runtime_called() {
  return any_runtime_call.load(std::memory_order_relaxed);
}

Device::Device(int index_, size_t capacity)
    : index(index_),
      arena(index_, capacity),
      legacy(make_stream(index_, StreamKind::kLegacy, 0, 0)) {}

Runtime::Runtime() : pinned_(settings().pinned_memory) {
  for (int i = 0; i < settings().devices; ++i) {
    devices_.push_back(std::make_unique<Device>(i, settings().device_memory));
  }
}

Runtime& Runtime::get() {
  // Leaked on purpose: programs call CUDA from static destructors and from
  // threads that outlive main(); stream workers must never see it destroyed.
  static auto* runtime = new Runtime();
  return *runtime;
}

int Runtime::current_device() const {
  return thread_device;
}

void Runtime::set_current_device(int index) {
  thread_device = index;
}

void Runtime::create_context(int index) {
  device(index).context.store(true);
}

Device& Runtime::current_with_context() {
  create_context(thread_device);
  return device(thread_device);
}

Place Runtime::locate(const void* ptr, size_t bytes) {
  for (const auto& d : devices_) {
    if (d->arena.owns_address(ptr)) {
      return Place{Place::kDevice, d->index, d->arena.view(ptr, bytes) != nullptr};
    }
  }
  void* base = nullptr;
  size_t size = 0;
  int device = kInvalidDeviceId;
  if (pinned_.find(ptr, &base, &size, &device)) {
    return Place{Place::kPinned, device, true};
  }
  return Place{Place::kPageable, kInvalidDeviceId, true};
}

uint8_t* Runtime::device_bytes(const void* ptr, size_t bytes) {
  for (const auto& d : devices_) {
    if (d->arena.owns_address(ptr)) {
      return d->arena.view(ptr, bytes);
    }
  }
  return nullptr;
}

Status Runtime::sticky_error(int index) {
  if (!valid_device(index)) {
    return kSuccess;
  }
  return static_cast<Status>(device(index).sticky.load());
}

void Runtime::fault(const Op& op, Status status) {
  int expected = kSuccess;
  if (device(op.device).sticky.compare_exchange_strong(expected, status)) {
    report(std::string(error_name(status)) + " on cuda:" + std::to_string(op.device) +
           " in " + op.what + ": it touched memory that is not allocated on the device; " +
           "every later call on this device fails");
  }
}

StreamRef Runtime::per_thread_stream(int index) {
  if (thread_streams.size() < devices_.size()) {
    thread_streams.resize(devices_.size());
  }
  StreamRef& stream = thread_streams[static_cast<size_t>(index)];
  if (!stream) {
    stream = make_stream(index, StreamKind::kPerThread, 0, 0);
    Device& d = device(index);
    std::lock_guard<std::mutex> guard(d.ordering);
    d.streams.push_back(stream);
  }
  return stream;
}

StreamRef Runtime::resolve(StreamHandle handle, Status* status) {
  *status = kSuccess;
  if (handle == nullptr || handle == legacy_stream_handle()) {
    return device(thread_device).legacy;
  }
  if (handle == per_thread_stream_handle()) {
    return per_thread_stream(thread_device);
  }
  std::lock_guard<std::mutex> guard(handles_mutex_);
  if (streams_.count(handle) == 0) {
    auto destroyed = destroyed_streams_.find(handle);
    if (destroyed != destroyed_streams_.end()) {
      destroyed_handle("stream " + std::to_string(destroyed->second));
    }
    *status = kErrorInvalidResourceHandle;
    return nullptr;
  }
  return handle->state;
}

StreamHandle Runtime::create_stream(int index, unsigned flags, int priority) {
  StreamRef stream = make_stream(index, StreamKind::kCreated, flags, priority);
  {
    Device& d = device(index);
    std::lock_guard<std::mutex> guard(d.ordering);
    prune(d.streams);
    d.streams.push_back(stream);
  }
  auto* handle = new CUstream_st{stream};
  std::lock_guard<std::mutex> guard(handles_mutex_);
  streams_.insert(handle);
  return handle;
}

Status Runtime::destroy_stream(StreamHandle handle) {
  {
    std::lock_guard<std::mutex> guard(handles_mutex_);
    auto destroyed = destroyed_streams_.find(handle);
    if (destroyed != destroyed_streams_.end()) {
      destroyed_handle("stream " + std::to_string(destroyed->second));
    }
    if (handle == nullptr || streams_.erase(handle) == 0) {
      return kErrorInvalidResourceHandle;
    }
    destroyed_streams_.emplace(handle, handle->state->id);
  }
  // Work already queued still runs, as on a GPU; the handle is gone now. It
  // stays allocated (an empty shell), remembered as destroyed: see resolve.
  handle->state->retire();
  handle->state.reset();
  return kSuccess;
}

std::shared_ptr<EventState> Runtime::resolve(EventHandle handle, Status* status) {
  std::lock_guard<std::mutex> guard(handles_mutex_);
  if (destroyed_events_.count(handle) != 0) {
    destroyed_handle("event " + address(handle));
  }
  if (handle == nullptr || events_.count(handle) == 0) {
    *status = kErrorInvalidResourceHandle;
    return nullptr;
  }
  *status = kSuccess;
  return handle->state;
}

EventHandle Runtime::create_event(int index, unsigned flags) {
  auto* handle = new CUevent_st{std::make_shared<EventState>(index, flags)};
  std::lock_guard<std::mutex> guard(handles_mutex_);
  events_.insert(handle);
  return handle;
}

Status Runtime::destroy_event(EventHandle handle) {
  {
    std::lock_guard<std::mutex> guard(handles_mutex_);
    if (destroyed_events_.count(handle) != 0) {
      destroyed_handle("event " + address(handle));
    }
    if (handle == nullptr || events_.erase(handle) == 0) {
      return kErrorInvalidResourceHandle;
    }
    destroyed_events_.insert(handle);
  }
  // A pending record keeps its marker; nothing else refers to the event. The
  // handle stays allocated, remembered as destroyed (see resolve).
  handle->state.reset();
  return kSuccess;
}

Status Runtime::submit(const StreamRef& stream, Op op) {
  Captures& captures = Captures::get();
  std::lock_guard<std::mutex> guard(captures.mutex());
  if (stream->capture) {
    return captures.record_locked(stream, std::move(op));
  }
  if (stream->kind == StreamKind::kLegacy) {
    Status status = captures.check_legacy_locked(stream->device);
    if (status != kSuccess) {
      return status;
    }
  }
  append(stream, std::move(op));
  return kSuccess;
}

Position Runtime::append(const StreamRef& stream, Op op) {
  if (stream->kind != StreamKind::kLegacy && !stream->blocking()) {
    return stream->push(std::move(op));
  }
  Device& d = device(stream->device);
  std::lock_guard<std::mutex> guard(d.ordering);
  auto wait_for_tail = [&op](const StreamRef& other) {
    Position tail = other->tail();
    op.not_before = std::max(op.not_before, tail.end);
    if (tail.index != 0 && !other->reached(tail.index)) {
      op.waits.push_back(Dependency{other, tail.index});
    }
  };
  if (stream->kind == StreamKind::kLegacy) {
    for (const auto& weak : d.streams) {
      StreamRef other = weak.lock();
      if (other && other->blocking()) {
        wait_for_tail(other);
      }
    }
  } else {
    wait_for_tail(d.legacy);
  }
  return stream->push(std::move(op));
}

Status Runtime::wait_really(const StreamRef& stream, uint64_t index) {
  Progress::instance().wait([&] {
    return stream->reached(index) || sticky_error(stream->device) != kSuccess;
  });
  return sticky_error(stream->device);
}

Status Runtime::wait(const StreamRef& stream, Position position) {
  Status status = wait_really(stream, position.index);
  Timing::get().reach(position.end);
  return status;
}

Status Runtime::wait_for(const std::shared_ptr<Timestamp>& marker, int index) {
  Progress::instance().wait([&] {
    return marker->reached.load(std::memory_order_acquire) ||
        sticky_error(index) != kSuccess;
  });
  Timing::get().reach(marker->virtual_end);
  return sticky_error(index);
}

Status Runtime::synchronize_stream(const StreamRef& stream) {
  if (stream->kind == StreamKind::kLegacy) {
    // Like any action on the legacy stream, a synchronisation first waits for
    // the blocking streams of its device.
    Op marker;
    marker.device = stream->device;
    marker.what = "cudaStreamSynchronize marker";
    return wait(stream, append(stream, std::move(marker)));
  }
  return wait(stream, stream->tail());
}

VirtualNs Runtime::stream_end(const StreamRef& stream) {
  VirtualNs end = stream->tail().end;
  if (stream->kind == StreamKind::kLegacy) {
    for (const StreamRef& other : streams_of(stream->device)) {
      if (other->blocking()) {
        end = std::max(end, other->tail().end);
      }
    }
  }
  return end;
}

Status Runtime::observe(VirtualNs end, const std::function<bool()>& really_done,
                             int index) {
  if (end > Timing::get().now()) {
    // A thread that polls (TensorFlow's EventMgr) sleeps between queries,
    // which takes no virtual time: it would lag behind the work it waits
    // for by one query's cost per poll. It sees the work done next time. A
    // poller is a thread whose previous call was such a query too: a thread
    // that queries once and goes on (EventMgr::ThenExecute polls on its
    // caller's thread) does not wait, on a GPU or here.
    const bool polling = thread_calls > 0 && thread_not_ready_query + 1 == thread_calls;
    if (settings().poll_clock && polling) {
      Timing::get().reach(end);
    }
    thread_not_ready_query = thread_calls;
    return kErrorNotReady;
  }
  if (really_done()) {
    return kSuccess;
  }
  if (host_functions_.load() > 0) {
    return kErrorNotReady;
  }
  Progress::instance().wait([&] {
    return really_done() || sticky_error(index) != kSuccess;
  });
  return sticky_error(index);
}

bool Runtime::stream_idle(const StreamRef& stream) {
  if (!stream->idle()) {
    return false;
  }
  if (stream->kind == StreamKind::kLegacy) {
    for (const StreamRef& other : streams_of(stream->device)) {
      if (other->blocking() && !other->idle()) {
        return false;
      }
    }
  }
  return true;
}

std::vector<StreamRef> Runtime::streams_of(int index) {
  Device& d = device(index);
  std::vector<StreamRef> streams{d.legacy};
  std::lock_guard<std::mutex> guard(d.ordering);
  for (const auto& weak : d.streams) {
    if (StreamRef stream = weak.lock()) {
      streams.push_back(stream);
    }
  }
  return streams;
}

Status Runtime::synchronize_device(int index) {
  VirtualNs end = 0;
  for (const StreamRef& stream : streams_of(index)) {
    Position tail = stream->tail();
    Status status = wait_really(stream, tail.index);
    if (status != kSuccess) {
      return status;
    }
    end = std::max(end, tail.end);
  }
  Timing::get().reach(end);
  return kSuccess;
}

Status Runtime::synchronize_all() {
  for (int index = 0; index < device_count(); ++index) {
    Status status = synchronize_device(index);
    if (status != kSuccess) {
      return status;
    }
  }
  return kSuccess;
}

} // namespace lms_sim
