#pragma once

// The timing model: virtual time for the simulated runtime, so that programs
// timed with CUDA events (cudaEventElapsedTime) measure what their work would
// take on the calibrated GPU (calibration.h), not how fast the host happens
// to run the simulation. It is bookkeeping beside the real execution: every
// operation still runs on its stream's worker, in the same order and with the
// same adversarial delays; only the clocks are virtual.
//
// Each host thread has a clock. A runtime call advances it by the call's
// cost; a host wait (a synchronisation, a synchronous copy) advances it to
// the end of the work waited for. An operation is scheduled when it is
// appended to its stream: it starts no earlier than the submitting thread's
// clock, its stream's previous operation and every wait, and when its engine
// is free; it ends after its work. Engines per device: the compute engine
// (kernels, memsets and device-to-device copies, one at a time: a kernel is
// taken to fill the GPU) and one host link per direction, which copies of
// that direction share one after the other. The two directions and the
// compute engine overlap; a copy moving while the other direction moves too
// gets the duplex rate. Work is placed in the earliest gap of its engine, so
// a copy that waits for an event does not hold back a later one that is
// ready. Given the same calls in the same order, the times are the same: a
// single-threaded program gets the same figures on every run.

#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace lms_sim {

// Nanoseconds since the first runtime call of the process.
using VirtualNs = double;

enum class Engine { kNone, kCompute, kToHost, kToDevice };

// What an operation occupies on the device, and for how long.
struct Work {
  Engine engine = Engine::kNone;
  double bytes = 0;        // copies: bytes over the host link
  double duration_ns = 0;  // compute: how long it runs
};

// Host time of the runtime calls the calibration prices.
enum class HostCall {
  kLaunch,
  kMemcpy,
  kEventRecord,
  kEventQuery,
  kStreamWaitEvent,
  kStreamQuery,
};

class Timing {
 public:
  static Timing& get();

  // The calling thread's clock. A thread starts at the latest time any
  // thread had reached.
  VirtualNs now();
  // A runtime call's host time.
  void charge(HostCall call);
  void charge_us(double microseconds);
  // The host saw work that ends at `end` complete: its clock moves there (if
  // it is behind), plus what a synchronisation costs.
  void reach(VirtualNs end);
  // A call that holds the driver for its host time: pinning or unpinning host
  // memory (cudaHostAlloc, cudaFreeHost). On a GPU the other threads' runtime
  // calls wait meanwhile (bench/reference/h200-2026-11-28: a pool that pinned
  // a chunk on its own thread each step made a 30-ms step take 629 ms). It
  // starts no earlier than the latest time any thread has reached: a thread
  // that slept on a condition variable (a growth thread woken by another) has
  // a clock from before its sleep, and it pins when it is woken, not then.
  void hold_driver_us(double microseconds);

  // Schedules work appended now on a stream of `device` that may not start
  // before `after`; returns its start and end.
  std::pair<VirtualNs, VirtualNs> schedule(int device, const Work& work, VirtualNs after);

  // A kernel's duration from what it declares: memory traffic, integer ALU
  // operations, or a time it asks for (a spinning kernel); the largest wins.
  static double kernel_ns(double memory_bytes, double alu_ops, double requested_ns);
  // Memsets and copies within device memory.
  static Work device_memory_work(double bytes_written, double bytes_read);

 private:
  // Busy intervals of one engine, sorted and disjoint.
  class Timeline {
   public:
    // The first interval overlapping [start, end), or nullptr.
    const std::pair<VirtualNs, VirtualNs>* overlap(VirtualNs start, VirtualNs end) const;
    void insert(VirtualNs start, VirtualNs end);
    // Forgets intervals that ended before `time`: nothing can start earlier.
    void forget_before(VirtualNs time);
    // Where a copy of `bytes` starting its transfer at `start` ends, at
    // `alone` bytes/ns, or `duplex` while this (the other direction's)
    // timeline is busy.
    VirtualNs transfer_end(VirtualNs start, double bytes, double alone, double duplex) const;

   private:
    std::vector<std::pair<VirtualNs, VirtualNs>> busy_;
  };

  struct Engines {
    Timeline compute;
    Timeline to_host;
    Timeline to_device;
  };

  Engines& engines_locked(int device);
  std::pair<VirtualNs, VirtualNs> place_locked(Timeline& timeline, VirtualNs ready,
                                               double duration);
  std::pair<VirtualNs, VirtualNs> place_copy_locked(Engines& engines, bool to_host,
                                                    VirtualNs ready, double bytes);
  void advance_locked(VirtualNs time);
  // Moves the calling thread's clock past every other thread's driver hold
  // that it falls in: its call waits for the driver.
  void wait_for_driver_locked();

  struct DriverHold {
    VirtualNs start, end;
    // The holding thread's clock, by address: a thread started after the holder exited may
    // reuse it, and is then not held by that hold (a pin long past, in practice).
    const void* owner;
  };

  std::mutex mutex_;
  std::vector<DriverHold> holds_;
  std::vector<Engines> devices_;
  VirtualNs latest_ = 0;  // the latest any thread's clock has reached
};

} // namespace lms_sim
