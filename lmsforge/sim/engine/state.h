#pragma once

// The process-wide state of the simulated runtime: devices (memory, legacy
// stream, primary context, sticky error), the current device of each thread,
// stream and event handles, and the one path by which work enters a stream.

#include "event.h"
#include "memory.h"
#include "stream.h"

#include "status.h"

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

struct CUstream_st {
  lms_sim::StreamRef state;
};

namespace lms_sim {

struct Device {
  Device(int index, size_t capacity);
  const int index;
  DeviceArena arena;
  // Whether the primary context exists (cuDevicePrimaryCtxGetState): made by
  // the first call that needs one on this device, not by queries.
  std::atomic<bool> context{false};
  // An illegal address fault poisons the context: every later call fails.
  std::atomic<int> sticky{kSuccess};
  StreamRef legacy;
  // Serialises appends to the legacy and blocking streams, so that the
  // implicit synchronisation between them sees one order.
  std::mutex ordering;
  std::vector<std::weak_ptr<StreamState>> streams;  // guarded by `ordering`
};

// Where an address points, for the copy rules and cudaPointerGetAttributes.
struct Place {
  enum Kind { kDevice, kPinned, kPageable } kind;
  int device;  // the owning device (pinned: current when allocated); -2 if none
  bool live;   // device: [ptr, ptr + bytes) lies inside one live allocation
};

// The runtime call running on this thread (api_call sets it), for messages.
const char* current_call();
void set_current_call(const char* call);
// Counts an API call of this thread (Runtime::observe tells pollers by it).
void count_api_call();
// Whether any runtime API call was made in this process (the driver front
// end's own calls go through the runtime too, after cuInit).
bool runtime_called();

class Runtime {
 public:
  static Runtime& get();

  int device_count() const { return static_cast<int>(devices_.size()); }
  bool valid_device(int index) const { return index >= 0 && index < device_count(); }
  Device& device(int index) { return *devices_.at(static_cast<size_t>(index)); }
  int current_device() const;
  void set_current_device(int index);
  // The current device, its primary context created (most calls need one).
  Device& current_with_context();
  void create_context(int index);

  PinnedHost& pinned() { return pinned_; }
  Place locate(const void* ptr, size_t bytes);
  // The bytes of live device memory [ptr, ptr + bytes) as the simulated
  // engines see them; nullptr for anything else (a fault).
  uint8_t* device_bytes(const void* ptr, size_t bytes);

  Status sticky_error(int device);
  void fault(const Op& op, Status status);

  // Streams. A null handle and legacy_stream_handle() mean the current device's
  // legacy stream; per_thread_stream_handle() the calling thread's default stream.
  // A handle destroyed earlier ends the process (one line on stderr naming the
  // call, then abort()): on a GPU it is a dangling pointer the driver
  // dereferences, undefined behaviour that crashes there, so a program must
  // never pass one, and an error code here would hide it.
  StreamRef resolve(StreamHandle handle, Status* status);
  StreamHandle create_stream(int device, unsigned flags, int priority);
  Status destroy_stream(StreamHandle handle);

  std::shared_ptr<EventState> resolve(EventHandle handle, Status* status);
  EventHandle create_event(int device, unsigned flags);
  Status destroy_event(EventHandle handle);

  // Appends `op` to `stream`, or records it when the stream is capturing.
  // The legacy stream first waits for every blocking stream of its device,
  // and a blocking stream first waits for the legacy stream.
  Status submit(const StreamRef& stream, Op op);
  // Appends without the capture check (the caller holds the capture lock or
  // knows the stream does not capture). Returns the position.
  Position append(const StreamRef& stream, Op op);

  // Host-side waits; they return a sticky error if one occurs meanwhile, and
  // move the thread's virtual clock to the end of the work waited for.
  Status wait(const StreamRef& stream, Position position);
  Status wait_for(const std::shared_ptr<Timestamp>& marker, int device);
  Status synchronize_stream(const StreamRef& stream);
  Status synchronize_device(int device);
  Status synchronize_all();
  bool stream_idle(const StreamRef& stream);
  // When everything appended to `stream` so far ends in virtual time (for
  // the legacy stream, with the blocking streams it synchronises with).
  VirtualNs stream_end(const StreamRef& stream);

  // What a query (cudaEventQuery, cudaStreamQuery, cudaEventElapsedTime) of
  // work ending at `end` answers: by virtual time, so that a program's
  // choices do not depend on how fast the simulation runs. Work the host's
  // clock has passed is complete: if its worker is still running it, the
  // query waits for it, unless a host function is queued or running
  // somewhere (its time is not modelled, and it may wait for this very
  // thread, as a test's gate does): then the real state answers.
  Status observe(VirtualNs end, const std::function<bool()>& really_done, int device);
  void host_function_queued() { host_functions_.fetch_add(1); }
  void host_function_done() { host_functions_.fetch_sub(1); }

  std::vector<StreamRef> streams_of(int device);

 private:
  Runtime();
  StreamRef per_thread_stream(int device);
  Status wait_really(const StreamRef& stream, uint64_t index);

  std::vector<std::unique_ptr<Device>> devices_;
  PinnedHost pinned_;
  std::mutex handles_mutex_;
  std::unordered_set<StreamHandle> streams_;
  std::unordered_set<EventHandle> events_;
  // Handles destroyed earlier, never freed so that no later handle reuses
  // their address: a call that names one ends the process (destroyed_handle).
  // A stream keeps its id for the message.
  std::unordered_map<StreamHandle, uint64_t> destroyed_streams_;
  std::unordered_set<EventHandle> destroyed_events_;
  std::atomic<int> host_functions_{0};  // queued or running
};

} // namespace lms_sim
