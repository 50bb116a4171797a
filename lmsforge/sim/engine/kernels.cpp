#include "kernels.h"

#include "state.h"
#include "settings.h"
#include "timing.h"

#include <chrono>
#include <cstring>
#include <regex>
#include <thread>

namespace lms_sim {

namespace {

// lms_test_slow_sum(const u32* src, u64 words, u64 spin_ns, u64* sum):
// spins spin_ns on %globaltimer, then adds every word of src to *sum
// atomically (c10/cuda/test/LargeModelSupport_test.cpp).
Status slow_sum(const std::vector<uint64_t>& args) {
  const void* src = reinterpret_cast<const void*>(args[0]);
  uint64_t words = args[1];
  uint64_t spin_ns = args[2];
  void* sum = reinterpret_cast<void*>(args[3]);
  auto spin = std::chrono::nanoseconds(
      static_cast<int64_t>(static_cast<double>(spin_ns) * settings().spin_scale));
  std::this_thread::sleep_for(spin);
  Runtime& runtime = Runtime::get();
  uint64_t total = 0;
  if (words != 0) {
    const uint8_t* bytes = runtime.device_bytes(src, words * sizeof(uint32_t));
    if (bytes == nullptr) {
      return kErrorIllegalAddress;
    }
    for (uint64_t i = 0; i < words; ++i) {
      uint32_t word = 0;
      std::memcpy(&word, bytes + i * sizeof(word), sizeof(word));
      total += word;
    }
  }
  uint8_t* target = runtime.device_bytes(sum, sizeof(uint64_t));
  if (target == nullptr) {
    return kErrorIllegalAddress;
  }
  __atomic_fetch_add(reinterpret_cast<uint64_t*>(target), total, __ATOMIC_SEQ_CST);
  return kSuccess;
}

// Its spin, then a read of the buffer.
double slow_sum_ns(const std::vector<uint64_t>& args) {
  return Timing::kernel_ns(static_cast<double>(args[1] * sizeof(uint32_t)), 0,
                           static_cast<double>(args[2]));
}

const HostKernel kKernels[] = {
    {"lms_test_slow_sum", {8, 8, 8, 8}, slow_sum, slow_sum_ns},
};

size_t param_size(const std::string& type) {
  if (type == "u64" || type == "s64" || type == "b64" || type == "f64") {
    return 8;
  }
  if (type == "u32" || type == "s32" || type == "b32" || type == "f32") {
    return 4;
  }
  return 0;  // not a scalar this simulator knows: no kernel will match
}

} // namespace

const HostKernel* find_kernel(const std::string& name) {
  for (const HostKernel& kernel : kKernels) {
    if (name == kernel.name) {
      return &kernel;
    }
  }
  return nullptr;
}

std::vector<PtxEntry> parse_ptx_entries(const std::string& ptx) {
  static const std::regex entry(R"(\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)\s*\(([^)]*)\))");
  static const std::regex param(R"(\.param\s+\.([a-z0-9]+)\s+[A-Za-z_$][A-Za-z0-9_$]*)");
  std::vector<PtxEntry> entries;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry);
       it != std::sregex_iterator(); ++it) {
    PtxEntry found{(*it)[1].str(), {}};
    std::string params = (*it)[2].str();
    for (auto p = std::sregex_iterator(params.begin(), params.end(), param);
         p != std::sregex_iterator(); ++p) {
      found.param_bytes.push_back(param_size((*p)[1].str()));
    }
    entries.push_back(std::move(found));
  }
  return entries;
}

} // namespace lms_sim
