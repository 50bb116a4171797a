#pragma once
// What both oversubscription benchmarks (PyTorch's oversubscription.cpp and
// TensorFlow's tensorflow/oversubscription.cc) compute the same way, so that
// their figures compare: the host reference of the final gradient, the raw
// pinned copy bandwidth, and the bandwidth bound a step is measured against.

#include "common.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lms_bench {

// Sampled elements of the final gradient of `layers` layers recomputed on the
// host (pattern.h); returns how many differ.
size_t gradient_mismatches(const std::vector<uint32_t>& grad, int layers, int rounds);

// Raw pinned cudaMemcpyAsync bandwidth at `bytes` per copy, in bytes per
// millisecond, on a stream of its own.
struct Bandwidth {
  double d2h_bytes_per_ms;
  double h2d_bytes_per_ms;
};
Bandwidth measure_copy_bandwidth(size_t bytes);

// The no-limit run's phases, where it ran.
struct OraclePhases {
  double forward_ms;
  double backward_ms;
};
// The medians of its timed steps' phases.
OraclePhases oracle_phases(const std::vector<double>& forward_ms,
                           const std::vector<double>& backward_ms);

// The bound per step (docs/gpu.md section 5):
//   max(T_forward, S_out / B_d2h) + max(T_backward, S_in / B_h2d)
// with T_* from the no-limit run (0 without one) and S_* the bytes LMS moved;
// the simple bound overlaps everything, the minimal-traffic one moves only
// what exceeds the limit.
struct Bound {
  double step_ms;
  double simple_step_ms;
  double min_traffic_step_ms;
  double transfer_out_ms;
  double transfer_in_ms;
  bool uses_oracle_compute;
};
Bound bandwidth_bound(const std::optional<OraclePhases>& oracle, int64_t out_bytes,
                      int64_t in_bytes, size_t activation_total, size_t limit,
                      const Bandwidth& bandwidth);

// The "bound" object of a result row.
void write_bound(Json& json, const Bound& bound);

// Closes the results array and the report, writes it to `out`, and throws
// CheckFailed when `failures` configurations computed a wrong gradient.
void finish_report(Json& json, size_t failures, const std::string& out);

} // namespace lms_bench
