#pragma once

// Host implementations of the device kernels that programs under the
// simulator launch from PTX (cuModuleLoadData + cuLaunchKernel), matched by
// entry name and parameter list. Each has the data effect of its PTX, run on
// the stream's worker; a kernel that spins for a time sleeps for it instead
// (times LMS_SIM_SPIN_SCALE).

#include "status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lms_sim {

struct HostKernel {
  const char* name;
  std::vector<size_t> param_bytes;  // the sizes of the PTX entry's .param list
  // Returns kErrorIllegalAddress when it would touch unallocated memory.
  Status (*run)(const std::vector<uint64_t>& args);
  // How long it takes on the device, in virtual time (timing.h).
  double (*duration_ns)(const std::vector<uint64_t>& args);
};

const HostKernel* find_kernel(const std::string& name);

// Entry names and their parameter sizes, as declared in a PTX module.
struct PtxEntry {
  std::string name;
  std::vector<size_t> param_bytes;
};
std::vector<PtxEntry> parse_ptx_entries(const std::string& ptx);

} // namespace lms_sim
