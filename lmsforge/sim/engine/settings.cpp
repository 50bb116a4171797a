#include "settings.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace lms_sim {

namespace {

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;

[[noreturn]] void bad_setting(const char* name, const char* value, const char* expected) {
  std::fprintf(stderr, "lms_cuda_sim: %s='%s' is not %s\n", name, value, expected);
  std::abort();
}

uint64_t read_unsigned(const char* name, uint64_t fallback, uint64_t min, uint64_t max) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long number = std::strtoull(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || number < min || number > max) {
    bad_setting(name, value, ("an integer in " + std::to_string(min) + ".." +
                              std::to_string(max)).c_str());
  }
  return number;
}

// "512M", "2G" or a byte count.
size_t read_size(const char* name, size_t fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  unsigned long long number = std::strtoull(value, &end, 10);
  std::string suffix(end ? end : "");
  size_t scale = suffix == "" ? 1 : suffix == "K" ? 1024 : suffix == "M" ? kMiB
      : suffix == "G" ? kGiB : 0;
  if (errno != 0 || end == value || scale == 0 || number == 0) {
    bad_setting(name, value, "a size such as 512M, 2G or a byte count");
  }
  return static_cast<size_t>(number) * scale;
}

double read_double(const char* name, double fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    return fallback;
  }
  char* end = nullptr;
  double number = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(number >= 0.0) || number > 1000.0) {
    bad_setting(name, value, "a number in 0..1000");
  }
  return number;
}

Settings read_settings() {
  Settings s;
  s.devices = static_cast<int>(read_unsigned("LMS_SIM_DEVICES", 2, 1, 16));
  s.device_memory = read_size("LMS_SIM_DEVICE_MEMORY", kGiB);
  s.pinned_memory = read_size("LMS_SIM_PINNED_MEMORY", 4 * kGiB);
  s.seed = read_unsigned("LMS_SIM_SEED", 0, 0, UINT64_MAX);
  s.max_delay_us = read_unsigned("LMS_SIM_MAX_DELAY_US", 3000, 0, 10 * 1000 * 1000);
  s.spin_scale = read_double("LMS_SIM_SPIN_SCALE", 1.0);
  s.trace = read_unsigned("LMS_SIM_TRACE", 0, 0, 1) == 1;
  s.poll_clock = read_unsigned("LMS_SIM_POLL_CLOCK", 0, 0, 1) == 1;
  const char* calibration = std::getenv("LMS_SIM_CALIBRATION");
  s.calibration_file = calibration != nullptr ? calibration : "";
  s.sparse_data = read_unsigned("LMS_SIM_SPARSE_DATA", 0, 0, 1) == 1;
  return s;
}

} // namespace

const Settings& settings() {
  static const Settings value = read_settings();
  return value;
}

bool adversarial() {
  return settings().seed != 0;
}

} // namespace lms_sim
