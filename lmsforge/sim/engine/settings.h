#pragma once

// What the simulated runtime is configured with, read once from the
// environment (README.md lists the variables).

#include <cstddef>
#include <cstdint>
#include <string>

namespace lms_sim {

struct Settings {
  int devices;                 // LMS_SIM_DEVICES, default 2
  size_t device_memory;        // LMS_SIM_DEVICE_MEMORY, bytes per device, default 1 GiB
  size_t pinned_memory;        // LMS_SIM_PINNED_MEMORY, page-locked host bytes, default 4 GiB
  uint64_t seed;               // LMS_SIM_SEED; 0 = no adversarial scheduling
  uint64_t max_delay_us;       // LMS_SIM_MAX_DELAY_US, the longest random delay, default 3000
  double spin_scale;           // LMS_SIM_SPIN_SCALE, factor on "sleep" kernel durations, default 1
  bool trace;                  // LMS_SIM_TRACE=1: one stderr line per executed operation
  bool poll_clock;             // LMS_SIM_POLL_CLOCK=1: a not-ready query moves its clock on
  std::string calibration_file;  // LMS_SIM_CALIBRATION: costs that override the H100's
  bool sparse_data;            // LMS_SIM_SPARSE_DATA=1: data moves in sample windows only
};

// Read on first use; a malformed variable aborts naming it (a silently
// ignored setting would make a replayed seed mean something else).
const Settings& settings();

bool adversarial();

} // namespace lms_sim
