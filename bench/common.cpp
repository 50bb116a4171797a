#include "common.h"

// The TensorFlow benchmark (bench/tensorflow) links no c10.
#ifndef LMS_BENCH_WITHOUT_C10
#include <c10/util/Exception.h>
#endif

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

namespace lms_bench {

void throw_cuda_error(cudaError_t status, const char* expr, const char* file, int line) {
  std::ostringstream message;
  message << expr << " failed: " << cudaGetErrorName(status) << " ("
          << cudaGetErrorString(status) << ") at " << file << ":" << line;
  throw std::runtime_error(message.str());
}

size_t parse_size(const std::string& text) {
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) {
    throw UsageError("not a size: '" + text + "' (use e.g. 4K, 16M, 1G or a byte count)");
  }
  size_t used = 0;
  unsigned long long number = 0;
  try {
    number = std::stoull(text, &used);
  } catch (const std::exception&) {
    throw UsageError("size out of range: '" + text + "'");
  }
  std::string suffix = text.substr(used);
  size_t scale = 1;
  if (suffix == "K" || suffix == "KiB") {
    scale = kKiB;
  } else if (suffix == "M" || suffix == "MiB") {
    scale = kMiB;
  } else if (suffix == "G" || suffix == "GiB") {
    scale = kGiB;
  } else if (!suffix.empty()) {
    throw UsageError("not a size: '" + text + "' (suffixes: K, M, G)");
  }
  if (number == 0 || number > (size_t(1) << 50) / scale) {
    throw UsageError("size out of range: '" + text + "'");
  }
  return static_cast<size_t>(number) * scale;
}

namespace {

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    parts.push_back(part);
  }
  if (parts.empty()) {
    throw UsageError("empty list");
  }
  return parts;
}

} // namespace

std::vector<size_t> parse_size_list(const std::string& text) {
  std::vector<size_t> sizes;
  for (const std::string& part : split(text)) {
    sizes.push_back(parse_size(part));
  }
  return sizes;
}

long parse_int(const std::string& text, long min, long max, const std::string& option) {
  size_t used = 0;
  long value = 0;
  try {
    value = std::stol(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw UsageError("--" + option + ": not an integer: '" + text + "'");
  }
  if (value < min || value > max) {
    throw UsageError("--" + option + ": " + text + " is outside " + std::to_string(min) + ".." +
                     std::to_string(max));
  }
  return value;
}

std::vector<long> parse_int_list(const std::string& text, long min, long max,
                                 const std::string& option) {
  std::vector<long> values;
  for (const std::string& part : split(text)) {
    values.push_back(parse_int(part, min, max, option));
  }
  return values;
}

std::string format_size(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int unit = 0;
  while (unit < 3 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + units[unit];
}

Args::Args(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void Args::option(const std::string& name, const std::string& default_value,
                  const std::string& help) {
  order_.push_back(name);
  options_[name] = Option{default_value, help, false, false};
}

void Args::flag(const std::string& name, const std::string& help) {
  order_.push_back(name);
  options_[name] = Option{"", help, true, false};
}

bool Args::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage();
      return false;
    }
    if (arg.rfind("--", 0) != 0) {
      throw UsageError("unexpected argument '" + arg + "'");
    }
    std::string name = arg.substr(2);
    std::string value;
    bool inline_value = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto found = options_.find(name);
    if (found == options_.end()) {
      throw UsageError("unknown option --" + name);
    }
    Option& option = found->second;
    if (option.is_flag) {
      if (inline_value) {
        throw UsageError("--" + name + " takes no value");
      }
      option.value = "1";
    } else {
      if (!inline_value) {
        if (i + 1 >= argc) {
          throw UsageError("--" + name + " needs a value");
        }
        value = argv[++i];
      }
      option.value = value;
    }
    option.set = true;
  }
  return true;
}

const std::string& Args::get(const std::string& name) const {
  return options_.at(name).value;
}

bool Args::given(const std::string& name) const {
  return options_.at(name).set;
}

std::string Args::get_or_short(const std::string& name, const std::string& short_value) const {
  return given("short") && !given(name) ? short_value : get(name);
}

std::string Args::usage() const {
  std::ostringstream out;
  out << "usage: " << program_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (const std::string& name : order_) {
    const Option& option = options_.at(name);
    out << "  --" << name << (option.is_flag ? "" : " VALUE") << "\n      " << option.help;
    if (!option.is_flag && !option.value.empty()) {
      out << " (default: " << option.value << ")";
    }
    out << "\n";
  }
  return out.str();
}

Summary summarize(std::vector<double> samples_ms) {
  if (samples_ms.empty()) {
    throw std::logic_error("summarize: no samples");
  }
  std::sort(samples_ms.begin(), samples_ms.end());
  size_t n = samples_ms.size();
  double median = n % 2 == 1 ? samples_ms[n / 2]
                             : 0.5 * (samples_ms[n / 2 - 1] + samples_ms[n / 2]);
  return Summary{median, samples_ms.front(), samples_ms.back()};
}

void require_device(int device) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw NoCudaDevice(std::string("no CUDA device (cudaGetDeviceCount: ") +
                       cudaGetErrorName(status) + ": " + cudaGetErrorString(status) + ")");
  }
  if (count == 0) {
    throw NoCudaDevice("no CUDA device (cudaGetDeviceCount found none)");
  }
  if (device >= count) {
    throw UsageError("--device " + std::to_string(device) + ": only " + std::to_string(count) +
                     " CUDA device(s) present");
  }
}

EventPair::EventPair() {
  LMS_BENCH_CUDA(cudaEventCreate(&start_));
  LMS_BENCH_CUDA(cudaEventCreate(&stop_));
}

EventPair::~EventPair() {
  // Destructors must not throw; a failure here cannot change any result.
  (void)cudaEventDestroy(start_);
  (void)cudaEventDestroy(stop_);
}

void EventPair::start(cudaStream_t stream) {
  LMS_BENCH_CUDA(cudaEventRecord(start_, stream));
}

void EventPair::stop(cudaStream_t stream) {
  LMS_BENCH_CUDA(cudaEventRecord(stop_, stream));
}

double EventPair::elapsed_ms() {
  LMS_BENCH_CUDA(cudaEventSynchronize(stop_));
  float ms = 0.0f;
  LMS_BENCH_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
  return ms;
}

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void Json::separate(const std::string& key) {
  if (!first_.empty()) {
    if (!first_.back()) {
      text_ += ",";
    }
    first_.back() = false;
    text_ += "\n" + std::string(2 * first_.size(), ' ');
  }
  if (!key.empty()) {
    text_ += quote(key) + ": ";
  }
}

Json& Json::begin_object(const std::string& key) {
  separate(key);
  text_ += "{";
  first_.push_back(true);
  return *this;
}

Json& Json::end_object() {
  first_.pop_back();
  text_ += "\n" + std::string(2 * first_.size(), ' ') + "}";
  return *this;
}

Json& Json::begin_array(const std::string& key) {
  separate(key);
  text_ += "[";
  first_.push_back(true);
  return *this;
}

Json& Json::end_array() {
  first_.pop_back();
  text_ += "]";
  return *this;
}

Json& Json::field(const std::string& key, const std::string& value) {
  separate(key);
  text_ += quote(value);
  return *this;
}

Json& Json::field(const std::string& key, const char* value) {
  return field(key, std::string(value));
}

Json& Json::field(const std::string& key, double value) {
  separate(key);
  if (std::isfinite(value)) {
    char buffer[32];
    std::snprintf(buffer, sizeof(buffer), "%.6g", value);
    text_ += buffer;
  } else {
    text_ += "null";
  }
  return *this;
}

Json& Json::field(const std::string& key, long long value) {
  separate(key);
  text_ += std::to_string(value);
  return *this;
}

Json& Json::field(const std::string& key, unsigned long long value) {
  separate(key);
  text_ += std::to_string(value);
  return *this;
}

Json& Json::field(const std::string& key, int value) {
  return field(key, static_cast<long long>(value));
}

Json& Json::field(const std::string& key, size_t value) {
  return field(key, static_cast<unsigned long long>(value));
}

Json& Json::field(const std::string& key, bool value) {
  separate(key);
  text_ += value ? "true" : "false";
  return *this;
}

Json& Json::null_field(const std::string& key) {
  separate(key);
  text_ += "null";
  return *this;
}

Json& Json::raw_field(const std::string& key, const std::string& json) {
  separate(key);
  text_ += json;
  return *this;
}

Json& Json::value(double value) {
  return field("", value);
}

Json& Json::summary(const std::string& key, const Summary& summary, size_t bytes,
                    const std::vector<double>& samples_ms) {
  begin_object(key);
  field("median_ms", summary.median_ms);
  field("min_ms", summary.min_ms);
  field("max_ms", summary.max_ms);
  field("gbps", static_cast<double>(bytes) / (summary.median_ms * 1e6));
  begin_array("samples_ms");
  for (double sample : samples_ms) {
    value(sample);
  }
  end_array();
  return end_object();
}

const std::string& Json::text() const {
  return text_;
}

void Json::write(const std::string& path) const {
  std::ofstream out(path);
  out << text_ << "\n";
  out.close();
  if (!out) {
    throw std::runtime_error("cannot write " + path);
  }
}

void write_timing(Json& json, const char* simulated_calibration) {
  json.begin_object("timing");
  if (simulated_calibration != nullptr) {
    json.field("clock", "virtual");
    json.raw_field("calibration", simulated_calibration);
  } else {
    json.field("clock", "cuda-events");
  }
  json.end_object();
}

void write_device_info(Json& json, int device) {
  cudaDeviceProp prop{};
  LMS_BENCH_CUDA(cudaGetDeviceProperties(&prop, device));
  int driver = 0;
  int runtime = 0;
  LMS_BENCH_CUDA(cudaDriverGetVersion(&driver));
  LMS_BENCH_CUDA(cudaRuntimeGetVersion(&runtime));
  char bus_id[32] = {0};
  LMS_BENCH_CUDA(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device));
  json.begin_object("device");
  json.field("index", device);
  json.field("name", prop.name);
  json.field("compute_capability",
             std::to_string(prop.major) + "." + std::to_string(prop.minor));
  json.field("total_memory_bytes", static_cast<size_t>(prop.totalGlobalMem));
  json.field("multiprocessors", prop.multiProcessorCount);
  json.field("async_engines", prop.asyncEngineCount);
  json.field("pci_bus_id", bus_id);
  json.field("driver_version", driver);
  json.field("runtime_version", runtime);
  json.end_object();
}

int run_program(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const UsageError& error) {
    std::cerr << program << ": error: " << error.what() << " (see --help)\n";
    return kExitUsage;
  } catch (const NoCudaDevice& error) {
    std::cerr << program << ": " << error.what() << "; nothing was measured\n";
    return kExitNoCuda;
  } catch (const CheckFailed& error) {
    std::cerr << program << ": CHECK FAILED: " << error.what() << "\n";
    return kExitFailed;
#ifndef LMS_BENCH_WITHOUT_C10
  } catch (const c10::Error& error) {
    std::cerr << program << ": c10 error: " << error.what_without_backtrace() << "\n";
    return kExitFailed;
#endif
  } catch (const std::exception& error) {
    std::cerr << program << ": error: " << error.what() << "\n";
    return kExitFailed;
  }
}

} // namespace lms_bench
