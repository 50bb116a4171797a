#include "stream.h"

#include "state.h"
#include "settings.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <tuple>

namespace lms_sim {

namespace {

thread_local bool on_worker = false;
std::atomic<uint64_t> next_stream_id{1};

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

} // namespace

uint64_t Rng::next() {
  state_ += 0x9e3779b97f4a7c15ULL;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

double Rng::uniform() {
  return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t Rng::below(uint64_t bound) {
  return bound == 0 ? 0 : next() % bound;
}

std::chrono::microseconds pick_delay(Rng& rng) {
  if (!adversarial()) {
    return std::chrono::microseconds(0);
  }
  // Half the operations start at once, most of the rest a little late, and
  // one in ten up to the configured maximum: late enough to let work queued
  // later on other streams overtake it.
  uint64_t longest = settings().max_delay_us;
  double u = rng.uniform();
  if (u < 0.5) {
    return std::chrono::microseconds(0);
  }
  uint64_t bound = u < 0.9 ? std::min<uint64_t>(longest, 200) : longest;
  return std::chrono::microseconds(rng.below(bound + 1));
}

Progress& Progress::instance() {
  static auto* progress = new Progress();  // leaked: used during static destruction
  return *progress;
}

void Progress::wait(const std::function<bool()>& done) {
  std::unique_lock<std::mutex> lock(mutex_);
  // The timeout only bounds a missed wake-up; `done` decides.
  while (!done()) {
    changed_.wait_for(lock, std::chrono::milliseconds(50));
  }
}

void Progress::notify() {
  { std::lock_guard<std::mutex> guard(mutex_); }
  changed_.notify_all();
}

StreamState::StreamState(int device_, StreamKind kind_, unsigned flags_, int priority_)
    : device(device_),
      kind(kind_),
      flags(flags_),
      priority(priority_),
      id(next_stream_id++),
      rng_(mix(settings().seed) ^ mix(id)) {}

StreamRef make_stream(int device, StreamKind kind, unsigned flags, int priority) {
  auto stream = std::make_shared<StreamState>(device, kind, flags, priority);
  stream->self_ = stream;
  return stream;
}

bool StreamState::blocking() const {
  return kind == StreamKind::kPerThread ||
      (kind == StreamKind::kCreated && (flags & kStreamNonBlocking) == 0);
}

Position StreamState::push(Op op) {
  std::lock_guard<std::mutex> guard(mutex_);
  // The engines of the device whose memory the work touches (a copy's).
  std::tie(op.virtual_start, op.virtual_end) =
      Timing::get().schedule(op.device, op.work, std::max(virtual_tail_, op.not_before));
  virtual_tail_ = op.virtual_end;
  if (op.stamp) {
    op.stamp->virtual_end = op.virtual_end;
  }
  if (op.kind == OpKind::kHostFunc) {
    Runtime::get().host_function_queued();
  }
  queue_.push_back(std::move(op));
  Position position{++appended_, virtual_tail_};
  if (!worker_started_) {
    worker_started_ = true;
    std::thread(run_worker, self_.lock()).detach();
  }
  work_.notify_one();
  return position;
}

Position StreamState::tail() {
  std::lock_guard<std::mutex> guard(mutex_);
  return Position{appended_, virtual_tail_};
}

void StreamState::retire() {
  std::lock_guard<std::mutex> guard(mutex_);
  retired_ = true;
  work_.notify_one();
}

void StreamState::run_worker(StreamRef self) {
  on_worker = true;
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(self->mutex_);
      self->work_.wait(lock, [&] { return !self->queue_.empty() || self->retired_; });
      if (self->queue_.empty()) {
        return;  // retired and drained
      }
      op = std::move(self->queue_.front());
      self->queue_.pop_front();
    }
    self->execute(op);
  }
}

void StreamState::execute(Op& op) {
  Runtime& runtime = Runtime::get();
  Progress::instance().wait([&] {
    if (runtime.sticky_error(device) != kSuccess) {
      return true;
    }
    for (const Dependency& dependency : op.waits) {
      if (!dependency.stream->reached(dependency.position)) {
        return false;
      }
    }
    return true;
  });
  if (op.body && runtime.sticky_error(device) == kSuccess) {
    auto delay = pick_delay(rng_);
    if (delay.count() > 0) {
      std::this_thread::sleep_for(delay);
    }
    if (settings().trace) {
      std::fprintf(stderr, "lms_cuda_sim: stream %llu: %s [virtual %.3f .. %.3f us]\n",
                   static_cast<unsigned long long>(id), op.what.c_str(),
                   op.virtual_start / 1000.0, op.virtual_end / 1000.0);
    }
    ExecContext context{rng_};
    Status status = op.body(context);
    if (status != kSuccess) {
      runtime.fault(op, status);
    }
  }
  if (op.kind == OpKind::kHostFunc) {
    runtime.host_function_done();
  }
  if (op.stamp) {
    op.stamp->reached.store(true, std::memory_order_release);
  }
  completed_.fetch_add(1, std::memory_order_acq_rel);
  Progress::instance().notify();
}

bool in_host_function() {
  return on_worker;
}

} // namespace lms_sim
