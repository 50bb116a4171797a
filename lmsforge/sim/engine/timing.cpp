#include "timing.h"

#include "calibration.h"

#include <algorithm>
#include <limits>

namespace lms_sim {

namespace {

constexpr double kNsPerUs = 1000.0;

struct ThreadClock {
  bool started = false;
  VirtualNs now = 0;
};

thread_local ThreadClock thread_clock;

} // namespace

Timing& Timing::get() {
  // Leaked, like the runtime: threads may call CUDA during static destruction.
  static auto* timing = new Timing();
  return *timing;
}

void Timing::advance_locked(VirtualNs time) {
  if (!thread_clock.started) {
    thread_clock.started = true;
    thread_clock.now = latest_;
  }
  thread_clock.now = std::max(thread_clock.now, time);
  latest_ = std::max(latest_, thread_clock.now);
}

void Timing::wait_for_driver_locked() {
  advance_locked(0);
  // Holds are disjoint and in time order (each starts at latest_, past every earlier one's
  // end), so one pass follows a chain of them.
  for (const DriverHold& hold : holds_) {
    if (hold.owner != &thread_clock && hold.start <= thread_clock.now &&
        thread_clock.now < hold.end) {
      advance_locked(hold.end);
    }
  }
}

void Timing::hold_driver_us(double microseconds) {
  std::lock_guard<std::mutex> guard(mutex_);
  // latest_ is past every earlier hold's end: no other hold can catch this thread there.
  advance_locked(latest_);
  VirtualNs start = thread_clock.now;
  advance_locked(start + microseconds * kNsPerUs);
  // Old holds cannot catch a clock any more once every thread is past them;
  // without a list of threads, keep the recent ones (a pool pins a few chunks).
  constexpr size_t kKept = 64;
  if (holds_.size() == kKept) {
    holds_.erase(holds_.begin());
  }
  holds_.push_back(DriverHold{start, thread_clock.now, &thread_clock});
}

VirtualNs Timing::now() {
  std::lock_guard<std::mutex> guard(mutex_);
  advance_locked(0);
  return thread_clock.now;
}

void Timing::charge_us(double microseconds) {
  std::lock_guard<std::mutex> guard(mutex_);
  wait_for_driver_locked();
  advance_locked(thread_clock.now + microseconds * kNsPerUs);
}

void Timing::charge(HostCall call) {
  const Calibration& c = calibration();
  switch (call) {
    case HostCall::kLaunch: return charge_us(c.launch_us);
    case HostCall::kMemcpy: return charge_us(c.memcpy_call_us);
    case HostCall::kEventRecord: return charge_us(c.event_record_us);
    case HostCall::kEventQuery: return charge_us(c.event_query_us);
    case HostCall::kStreamWaitEvent: return charge_us(c.stream_wait_event_us);
    case HostCall::kStreamQuery: return charge_us(c.stream_query_us);
  }
}

void Timing::reach(VirtualNs end) {
  std::lock_guard<std::mutex> guard(mutex_);
  wait_for_driver_locked();
  advance_locked(end);
  advance_locked(thread_clock.now + calibration().host_wait_us * kNsPerUs);
}

double Timing::kernel_ns(double memory_bytes, double alu_ops, double requested_ns) {
  const Calibration& c = calibration();
  return std::max({memory_bytes / c.hbm_gbps, alu_ops / c.alu_gops, requested_ns});
}

Work Timing::device_memory_work(double bytes_written, double bytes_read) {
  return Work{Engine::kCompute, 0, (bytes_written + bytes_read) / calibration().hbm_gbps};
}

Timing::Engines& Timing::engines_locked(int device) {
  if (devices_.size() <= static_cast<size_t>(device)) {
    devices_.resize(static_cast<size_t>(device) + 1);
  }
  return devices_[static_cast<size_t>(device)];
}

std::pair<VirtualNs, VirtualNs> Timing::schedule(int device, const Work& work,
                                                 VirtualNs after) {
  std::lock_guard<std::mutex> guard(mutex_);
  wait_for_driver_locked();
  VirtualNs ready = std::max(after, thread_clock.now);
  Engines& engines = engines_locked(device);
  switch (work.engine) {
    case Engine::kNone:
      return {ready, ready + work.duration_ns};
    case Engine::kCompute:
      return place_locked(engines.compute, ready, work.duration_ns);
    case Engine::kToHost:
      return place_copy_locked(engines, true, ready, work.bytes);
    case Engine::kToDevice:
      return place_copy_locked(engines, false, ready, work.bytes);
  }
  return {ready, ready};
}

std::pair<VirtualNs, VirtualNs> Timing::place_locked(Timeline& timeline, VirtualNs ready,
                                                     double duration) {
  timeline.forget_before(thread_clock.now);
  VirtualNs start = ready;
  while (const auto* busy = timeline.overlap(start, start + duration)) {
    start = busy->second;
  }
  if (duration > 0) {
    timeline.insert(start, start + duration);
  }
  return {start, start + duration};
}

std::pair<VirtualNs, VirtualNs> Timing::place_copy_locked(Engines& engines, bool to_host,
                                                          VirtualNs ready, double bytes) {
  const Calibration& c = calibration();
  Timeline& own = to_host ? engines.to_host : engines.to_device;
  const Timeline& other = to_host ? engines.to_device : engines.to_host;
  double latency = (to_host ? c.d2h_latency_us : c.h2d_latency_us) * kNsPerUs;
  double alone = to_host ? c.d2h_gbps : c.h2d_gbps;
  double duplex = std::min(alone, c.duplex_gbps);
  own.forget_before(thread_clock.now);
  VirtualNs start = ready;
  VirtualNs end = other.transfer_end(start + latency, bytes, alone, duplex);
  // The link is the copy's for its whole length: the earliest gap that fits.
  while (const auto* busy = own.overlap(start, end)) {
    start = busy->second;
    end = other.transfer_end(start + latency, bytes, alone, duplex);
  }
  own.insert(start, end);
  return {start, end};
}

const std::pair<VirtualNs, VirtualNs>* Timing::Timeline::overlap(VirtualNs start,
                                                                 VirtualNs end) const {
  // The first interval that ends after `start`; it overlaps if it begins before `end`.
  auto it = std::upper_bound(busy_.begin(), busy_.end(), start,
                             [](VirtualNs time, const auto& interval) {
                               return time < interval.second;
                             });
  if (it != busy_.end() && it->first < end) {
    return &*it;
  }
  return nullptr;
}

void Timing::Timeline::insert(VirtualNs start, VirtualNs end) {
  auto it = std::lower_bound(busy_.begin(), busy_.end(), start,
                             [](const auto& interval, VirtualNs time) {
                               return interval.first < time;
                             });
  busy_.insert(it, {start, end});
}

void Timing::Timeline::forget_before(VirtualNs time) {
  auto it = std::upper_bound(busy_.begin(), busy_.end(), time,
                             [](VirtualNs t, const auto& interval) { return t < interval.second; });
  busy_.erase(busy_.begin(), it);
}

VirtualNs Timing::Timeline::transfer_end(VirtualNs start, double bytes, double alone,
                                         double duplex) const {
  VirtualNs time = start;
  double left = bytes;
  auto it = std::upper_bound(busy_.begin(), busy_.end(), time,
                             [](VirtualNs t, const auto& interval) { return t < interval.second; });
  while (left > 0) {
    bool shared = it != busy_.end() && it->first <= time;
    double rate = shared ? duplex : alone;
    VirtualNs until = shared ? it->second
        : it != busy_.end() ? it->first : std::numeric_limits<VirtualNs>::infinity();
    double movable = (until - time) * rate;
    if (movable >= left) {
      return time + left / rate;
    }
    left -= movable;
    time = until;
    if (shared) {
      ++it;
    }
  }
  return time;
}

} // namespace lms_sim
