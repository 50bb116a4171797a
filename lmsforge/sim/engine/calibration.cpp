#include "calibration.h"

#include "settings.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace lms_sim {

namespace {

constexpr const char* kEvidence = "bench/reference/h100-2026-11-22";
constexpr const char* kDefaultName = "h100-2026-11-22";

struct Scalar {
  const char* key;
  double Calibration::*field;
  double value;
  const char* unit;
  const char* source;
};

// The H100 (80GB HBM3, sm_90, PCIe Gen5 host link) of the evidence folder.
// Copies: calibration.txt times single copies with events; latency and rate
// come from its smallest and largest rows, t = latency + bytes / rate.
const Scalar kScalars[] = {
    {"d2h_latency_us", &Calibration::d2h_latency_us, 3.926, "us",
     "calibration.txt d2h column: 4096 B in 4.00 us, 1 GiB in 19479.74 us"},
    {"d2h_gbps", &Calibration::d2h_gbps, 55.13, "GB/s",
     "calibration.txt d2h column: 4096 B in 4.00 us, 1 GiB in 19479.74 us"},
    {"h2d_latency_us", &Calibration::h2d_latency_us, 4.822, "us",
     "calibration.txt h2d column: 4096 B in 4.90 us, 1 GiB in 20376.03 us"},
    {"h2d_gbps", &Calibration::h2d_gbps, 52.71, "GB/s",
     "calibration.txt h2d column: 4096 B in 4.90 us, 1 GiB in 20376.03 us"},
    {"duplex_gbps", &Calibration::duplex_gbps, 46.87, "GB/s",
     "calibration.txt both-directions columns, mean of the rows from 4 MiB "
     "(47.09 49.32 48.04 44.10 45.79)"},
    {"alu_gops", &Calibration::alu_gops, 16727.0, "Gop/s",
     "not in calibration.txt: 132 SMs x 64 32-bit integer ALU results per SM and "
     "clock (CUDA programming guide, compute capability 9.0) x 1.98 GHz (H100 SXM5 "
     "boost clock)"},
    {"hbm_gbps", &Calibration::hbm_gbps, 3350.0, "GB/s",
     "not in calibration.txt: H100 SXM5 HBM3 bandwidth (data sheet)"},
    {"launch_us", &Calibration::launch_us, 2.75, "us",
     "calibration.txt: kernel launch (empty spin) median"},
    {"memcpy_call_us", &Calibration::memcpy_call_us, 2.35, "us",
     "calibration.txt both-directions row of 4096 B: 2 x 65536 cudaMemcpyAsync "
     "calls at 0.87 GB/s each way, host-bound"},
    {"event_record_us", &Calibration::event_record_us, 0.20, "us",
     "calibration.txt: cudaEventRecord median"},
    {"event_query_us", &Calibration::event_query_us, 0.17, "us",
     "calibration.txt: cudaEventQuery (done) median"},
    {"stream_wait_event_us", &Calibration::stream_wait_event_us, 0.16, "us",
     "calibration.txt: cudaStreamWaitEvent median"},
    {"stream_query_us", &Calibration::stream_query_us, 0.20, "us",
     "calibration.txt: cudaStreamQuery (idle) median"},
    {"host_wait_us", &Calibration::host_wait_us, 0.17, "us",
     "not measured: a synchronisation costs what a query of finished work does"},
};

constexpr double kMiB = 1024.0 * 1024.0;

struct Curve {
  const char* key;
  CostCurve Calibration::*field;
  std::vector<std::pair<double, double>> points;
  const char* source;
};

const Curve kCurves[] = {
    {"device_alloc_free_us", &Calibration::device_alloc_free_us,
     {{2 * kMiB, 58.08}, {32 * kMiB, 76.94}, {512 * kMiB, 235.12}},
     "calibration.txt: cudaMalloc+cudaFree medians of 2, 32, 512 MiB"},
    {"pinned_alloc_free_us", &Calibration::pinned_alloc_free_us,
     {{2 * kMiB, 751.03}, {32 * kMiB, 12825.95}, {512 * kMiB, 297910.24}},
     "calibration.txt: cudaHostAlloc+cudaFreeHost medians of 2, 32, 512 MiB"},
};

[[noreturn]] void bad_file(const std::string& file, int line, const std::string& why) {
  std::fprintf(stderr, "lms_cuda_sim: LMS_SIM_CALIBRATION=%s, line %d: %s\n", file.c_str(),
               line, why.c_str());
  std::abort();
}

std::string trim(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r");
  size_t last = text.find_last_not_of(" \t\r");
  return first == std::string::npos ? "" : text.substr(first, last - first + 1);
}

bool parse_number(const std::string& text, double* out) {
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0' || !(value > 0.0)) {
    return false;
  }
  *out = value;
  return true;
}

// "2M:58.08 32M:76.94": sizes with K, M or G (powers of 1024) or in bytes.
bool parse_curve(const std::string& text, CostCurve* out) {
  std::istringstream words(text);
  std::string word;
  std::vector<std::pair<double, double>> points;
  while (words >> word) {
    size_t colon = word.find(':');
    if (colon == std::string::npos) {
      return false;
    }
    std::string size = word.substr(0, colon);
    double scale = 1.0;
    if (!size.empty() && (size.back() == 'K' || size.back() == 'M' || size.back() == 'G')) {
      scale = size.back() == 'K' ? 1024.0 : size.back() == 'M' ? kMiB : 1024.0 * kMiB;
      size.pop_back();
    }
    double bytes = 0.0, us = 0.0;
    if (!parse_number(size, &bytes) || !parse_number(word.substr(colon + 1), &us)) {
      return false;
    }
    if (!points.empty() && bytes * scale <= points.back().first) {
      return false;  // sizes must grow
    }
    points.emplace_back(bytes * scale, us);
  }
  if (points.empty()) {
    return false;
  }
  out->points = std::move(points);
  return true;
}

void apply_file(const std::string& file, Calibration* c) {
  std::ifstream in(file);
  if (!in) {
    bad_file(file, 0, "cannot be read");
  }
  std::string text;
  int number = 0;
  bool named = false;
  while (std::getline(in, text)) {
    ++number;
    std::string line = trim(text.substr(0, text.find('#')));
    if (line.empty()) {
      continue;
    }
    size_t equals = line.find('=');
    if (equals == std::string::npos) {
      bad_file(file, number, "expected `key = value`");
    }
    std::string key = trim(line.substr(0, equals));
    std::string value = trim(line.substr(equals + 1));
    if (key == "name") {
      c->name = value;
      named = !value.empty();
      continue;
    }
    bool known = false;
    for (const Scalar& scalar : kScalars) {
      if (key == scalar.key) {
        known = true;
        if (!parse_number(value, &(c->*scalar.field))) {
          bad_file(file, number, key + " is not a positive number");
        }
      }
    }
    for (const Curve& curve : kCurves) {
      if (key == curve.key) {
        known = true;
        if (!parse_curve(value, &(c->*curve.field))) {
          bad_file(file, number, key + " is not a list of growing SIZE:MICROSECONDS points");
        }
      }
    }
    if (!known) {
      bad_file(file, number, "unknown key '" + key + "' (README.md lists the keys)");
    }
  }
  if (!named) {
    c->name = std::string(kDefaultName) + " with overrides from " + file;
  }
}

Calibration load() {
  Calibration c;
  c.name = kDefaultName;
  for (const Scalar& scalar : kScalars) {
    c.*scalar.field = scalar.value;
  }
  for (const Curve& curve : kCurves) {
    (c.*curve.field).points = curve.points;
  }
  c.file = settings().calibration_file;
  if (!c.file.empty()) {
    apply_file(c.file, &c);
  }
  return c;
}

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
    }
    out += ch;
  }
  return out + "\"";
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.10g", value);
  return text;
}

} // namespace

double CostCurve::us_at(double bytes) const {
  if (points.size() == 1 || bytes <= points.front().first) {
    return points.front().second;
  }
  size_t upper = 1;
  while (upper + 1 < points.size() && bytes > points[upper].first) {
    ++upper;
  }
  const auto& [x0, y0] = points[upper - 1];
  const auto& [x1, y1] = points[upper];
  return y0 + (y1 - y0) * (bytes - x0) / (x1 - x0);
}

const Calibration& calibration() {
  static const Calibration value = load();
  return value;
}

std::string calibration_json() {
  const Calibration& c = calibration();
  std::string json = "{\"name\": " + quoted(c.name) + ", \"evidence\": " + quoted(kEvidence) +
      ", \"file\": " + (c.file.empty() ? std::string("null") : quoted(c.file)) +
      ", \"values\": {";
  bool first = true;
  for (const Scalar& scalar : kScalars) {
    json += std::string(first ? "" : ", ") + quoted(scalar.key) + ": {\"value\": " +
        number(c.*scalar.field) + ", \"unit\": " + quoted(scalar.unit) +
        ", \"source\": " + quoted(c.*scalar.field == scalar.value ? scalar.source
                                                                    : "override file") + "}";
    first = false;
  }
  for (const Curve& curve : kCurves) {
    std::string points;
    for (const auto& [bytes, us] : (c.*curve.field).points) {
      points += std::string(points.empty() ? "" : ", ") + "[" + number(bytes) + ", " +
          number(us) + "]";
    }
    bool overridden = (c.*curve.field).points != curve.points;
    json += ", " + quoted(curve.key) + ": {\"value\": [" + points +
        "], \"unit\": \"[bytes, us]\", \"source\": " +
        quoted(overridden ? "override file" : curve.source) + "}";
  }
  return json + "}}";
}

} // namespace lms_sim
