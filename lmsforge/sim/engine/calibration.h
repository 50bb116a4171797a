#pragma once

// What each simulated operation costs, for the timing model (timing.h): one
// table, by default the costs measured on an H100 on 2026-11-22
// (bench/reference/h100-2026-11-22/calibration.txt, from cudacal.cu), each
// value with the line of evidence it comes from. A file named by
// LMS_SIM_CALIBRATION overrides any of them, for another GPU (README.md).

#include <string>
#include <utility>
#include <vector>

namespace lms_sim {

// A cost that grows with a size: (bytes, microseconds) points, linear between
// them, the first point's cost below it, the last segment's slope above it.
struct CostCurve {
  std::vector<std::pair<double, double>> points;
  double us_at(double bytes) const;
};

struct Calibration {
  std::string name;
  std::string file;  // the override file, empty for the built-in table

  // Copies between device and page-locked host memory, one direction at a
  // time: a fixed latency, then the bytes at the link's rate (GB/s = bytes
  // per ns). When both directions copy at once, each moves at duplex_gbps.
  double d2h_latency_us;
  double d2h_gbps;
  double h2d_latency_us;
  double h2d_gbps;
  double duplex_gbps;
  // The device: 32-bit integer ALU operations and memory bytes per ns.
  double alu_gops;
  double hbm_gbps;
  // Host time of runtime calls.
  double launch_us;
  double memcpy_call_us;
  double event_record_us;
  double event_query_us;
  double stream_wait_event_us;
  double stream_query_us;
  double host_wait_us;
  // cudaMalloc + cudaFree and cudaHostAlloc + cudaFreeHost of one size,
  // together; each call is charged half.
  CostCurve device_alloc_free_us;
  CostCurve pinned_alloc_free_us;
};

// Read on first use; a malformed override file aborts naming the line.
const Calibration& calibration();

// The table in effect as a JSON object: its name, the override file, and
// every value with its unit and source.
std::string calibration_json();

} // namespace lms_sim
