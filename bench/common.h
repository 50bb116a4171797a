#pragma once

// What both benchmark programs share: exit codes, argument parsing, CUDA
// error checks, timing statistics and a small JSON writer.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace lms_bench {

// Exit codes, the same as run-gpu.sh's (docs/gpu.md).
constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;  // a data check failed, or CUDA or c10 reported an error
constexpr int kExitUsage = 2;
constexpr int kExitNoCuda = 4;  // no usable CUDA device: nothing was measured

// Built against lmsforge's simulated CUDA runtime (bench/CMakeLists.txt): the
// results say so, and are never a GPU measurement.
#ifdef LMS_BENCH_SIMULATED
constexpr bool kSimulatedRuntime = true;
#else
constexpr bool kSimulatedRuntime = false;
#endif

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * kKiB;
constexpr size_t kGiB = 1024 * kMiB;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct NoCudaDevice : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct CheckFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expr, const char* file,
                                   int line);

#define LMS_BENCH_CUDA(expr)                                              \
  do {                                                                    \
    cudaError_t lms_bench_status_ = (expr);                               \
    if (lms_bench_status_ != cudaSuccess) {                               \
      ::lms_bench::throw_cuda_error(lms_bench_status_, #expr, __FILE__, __LINE__); \
    }                                                                     \
  } while (0)

// "4K", "16M", "1G" (powers of 1024) or a plain byte count.
size_t parse_size(const std::string& text);
std::vector<size_t> parse_size_list(const std::string& text);
long parse_int(const std::string& text, long min, long max, const std::string& option);
std::vector<long> parse_int_list(const std::string& text, long min, long max,
                                 const std::string& option);
std::string format_size(size_t bytes);

// --option value pairs, every option declared with its default; --help prints
// the usage. Unknown options and missing values are usage errors.
class Args {
 public:
  Args(std::string program, std::string summary);
  void option(const std::string& name, const std::string& default_value, const std::string& help);
  void flag(const std::string& name, const std::string& help);
  // Returns false when --help was given (the usage has been printed).
  bool parse(int argc, char** argv);
  const std::string& get(const std::string& name) const;
  // Whether the command line set `name` (a flag or an option).
  bool given(const std::string& name) const;
  // The option's value, or `short_value` when --short was given and the
  // option was not.
  std::string get_or_short(const std::string& name, const std::string& short_value) const;
  std::string usage() const;

 private:
  struct Option {
    std::string value;
    std::string help;
    bool is_flag;
    bool set;
  };
  std::string program_;
  std::string summary_;
  std::vector<std::string> order_;
  std::map<std::string, Option> options_;
};

struct Summary {
  double median_ms;
  double min_ms;
  double max_ms;
};
Summary summarize(std::vector<double> samples_ms);

// Fails unless a CUDA device `device` exists; the message says why not.
void require_device(int device);

// Times work queued on one stream with a pair of CUDA events.
class EventPair {
 public:
  EventPair();
  ~EventPair();
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  void start(cudaStream_t stream);
  void stop(cudaStream_t stream);
  // Waits for the stop event.
  double elapsed_ms();

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Minimal JSON output: values are written as they come, commas by the writer.
class Json {
 public:
  Json& begin_object(const std::string& key = "");
  Json& end_object();
  Json& begin_array(const std::string& key = "");
  Json& end_array();
  Json& field(const std::string& key, const std::string& value);
  Json& field(const std::string& key, const char* value);
  Json& field(const std::string& key, double value);
  Json& field(const std::string& key, long long value);
  Json& field(const std::string& key, unsigned long long value);
  Json& field(const std::string& key, int value);
  Json& field(const std::string& key, size_t value);
  Json& field(const std::string& key, bool value);
  Json& null_field(const std::string& key);
  // A value that is JSON text already.
  Json& raw_field(const std::string& key, const std::string& json);
  Json& value(double value);
  Json& summary(const std::string& key, const Summary& summary, size_t bytes,
                const std::vector<double>& samples_ms);
  const std::string& text() const;
  void write(const std::string& path) const;

 private:
  void separate(const std::string& key);
  std::string text_;
  std::vector<bool> first_;
};

std::string quote(const std::string& text);

// The device's name, memory, compute capability, driver and runtime versions.
void write_device_info(Json& json, int device);

// How the times were taken: CUDA events on a GPU; on lmsforge's simulated
// runtime, events in its virtual time, with the calibration table it used
// (`simulated_calibration`, kernels.h).
void write_timing(Json& json, const char* simulated_calibration);

// Runs `body` and turns every failure into a message and an exit code.
int run_program(const char* program, const std::function<int()>& body);

} // namespace lms_bench
