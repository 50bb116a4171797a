// lms_bench_oversub: a synthetic forward/backward loop whose activations
// total k times the LMS limit (k = 1, 2, 4, 8), against the same loop with no
// limit and against the lower bound of lms-anchors.md section 4.3 (docs/gpu.md).
//
// One step, like a training step: forward allocates one activation storage
// per layer (layer i reads layer i-1), then backward walks the layers in
// reverse, updating a gradient buffer from each activation and freeing it.
// Activations are pinned while a kernel uses them and inactive otherwise, so
// LMS pages the oldest out during forward and back in during backward.
//
// The no-limit run ("oracle") is the same loop with LMS off; it runs only
// where all activations fit on the device. The bound per step is
//   max(T_forward, S_out / B_d2h) + max(T_backward, S_in / B_h2d)
// with T_* from the oracle (0 without one), S_* the bytes LMS moved (its
// counters) and B_* raw pinned cudaMemcpyAsync bandwidth measured in this run
// at the activation size. The final gradient is checked against a host
// reference on sampled elements and, where the oracle ran, bit for bit
// against the oracle's.

#include "common.h"
#include "kernels.h"
#include "oversubscription_bound.h"
#include "primary_context.h"
#include "torch_compat.h"
#include "pattern.h"

#include <c10/core/LargeModelSupport.h>
#include <c10/core/StorageImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDALargeModelSupport.h>
#include <c10/cuda/CUDAStream.h>

// A series without the policies ahead of need (issue 15) reports no policy statistics.
#if __has_include(<c10/core/LargeModelSupportPolicy.h>)
#define LMS_BENCH_POLICY_STATS 1
#endif
// A series with a pinned host pool (CUDALmsHostPool.h) reports what it pinned during each step:
// pinning costs about 0.6 ms per MiB on the host (bench/reference/*/calibration.txt), which the
// device-side step time shows only as idle gaps.
#if __has_include(<c10/cuda/CUDALmsHostPool.h>)
#include <c10/cuda/CUDALmsHostPool.h>
#define LMS_BENCH_HOST_POOL_STATS 1
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace lms_bench;
namespace Caching = c10::cuda::CUDACachingAllocator;
namespace lms = c10::cuda::lms;
using StoragePtr = c10::intrusive_ptr<c10::StorageImpl>;

constexpr const char* kProgram = "lms_bench_oversub";
// Device memory left free beside an oracle run (CUDA context, the gradient).
constexpr double kOracleMemoryShare = 0.85;

struct Settings {
  std::string out;
  size_t limit;
  std::vector<long> factors;
  int layers_per_limit;
  int rounds;
  int data_rounds;  // what the host computes on the simulator (kernels.h, Mixing)
  int steps;
  int warmup;
  int device;
  bool oracle;
};

Settings parse(int argc, char** argv, bool* help) {
  Args args(kProgram,
            "Times a forward/backward loop over activations of k x the LMS limit against\n"
            "the same loop without a limit and the bandwidth bound; writes JSON.");
  args.option("out", "", "JSON file to write (required)");
  args.option("limit", "1G", "LMS device memory limit");
  args.option("factors", "1,2,4,8", "oversubscription factors k, comma-separated, 1..64");
  args.option("layers-per-limit", "8", "activations per limit's worth of memory (sets their size)");
  args.option("rounds", "64", "mixing rounds per element and layer (compute per byte)");
  if (kSimulatedRuntime) {
    args.option("data-rounds", "",
                "rounds of --rounds the simulator's host computes into the data (default: "
                "all); the simulated device takes the time of --rounds");
  }
  args.option("steps", "10", "timed steps per configuration (the median is reported)");
  args.option("warmup", "2", "untimed steps per configuration");
  args.option("device", "0", "CUDA device index");
  args.flag("no-oracle", "skip the runs without a limit");
  args.flag("short", "a smoke run (limit 80M: 8 activations of 10 MiB per limit, k = 1,2,4,8, "
                     "64 rounds, 1 step, 1 warm-up; on the simulator 2 data rounds) that the "
                     "simulated CUDA runtime runs in seconds with a GPU's balance of compute "
                     "and copies; options given explicitly still apply");
  *help = !args.parse(argc, argv);
  Settings s;
  if (*help) {
    return s;
  }
  s.out = args.get("out");
  if (s.out.empty()) {
    throw UsageError("--out is required");
  }
  s.limit = parse_size(args.get_or_short("limit", "80M"));
  if (s.limit < 64 * kMiB) {
    throw UsageError("--limit: at least 64M");
  }
  s.factors = parse_int_list(args.get_or_short("factors", "1,2,4,8"), 1, 64, "factors");
  s.layers_per_limit = static_cast<int>(
      parse_int(args.get_or_short("layers-per-limit", "8"), 2, 1024, "layers-per-limit"));
  s.rounds = static_cast<int>(parse_int(args.get("rounds"), 1, 100000, "rounds"));
  s.data_rounds = s.rounds;
  if (kSimulatedRuntime && !args.get_or_short("data-rounds", "2").empty()) {
    s.data_rounds = static_cast<int>(
        parse_int(args.get_or_short("data-rounds", "2"), 1, s.rounds, "data-rounds"));
  }
  s.steps = static_cast<int>(parse_int(args.get_or_short("steps", "1"), 1, 10000, "steps"));
  s.warmup = static_cast<int>(parse_int(args.get_or_short("warmup", "1"), 0, 1000, "warmup"));
  s.device = static_cast<int>(parse_int(args.get("device"), 0, 63, "device"));
  s.oracle = !args.given("no-oracle");
  return s;
}

// The activation size: a limit's worth of memory holds `layers_per_limit`.
size_t activation_bytes(const Settings& s) {
  size_t bytes = s.limit / static_cast<size_t>(s.layers_per_limit);
  return bytes / (2 * kMiB) * (2 * kMiB);  // whole caching-allocator pages
}

StoragePtr make_storage(size_t nbytes) {
  return c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), c10::SymInt(static_cast<int64_t>(nbytes)),
      Caching::get(), /*resizable=*/false);
}

// pin()/unpin() where LMS manages the storage; nothing for the oracle.
void pin(const StoragePtr& storage) {
  if (storage->lms() != nullptr) {
    storage->lms()->pin();
  }
}

void unpin(const StoragePtr& storage) {
  if (storage->lms() != nullptr) {
    storage->lms()->unpin();
  }
}

struct StepTimes {
  std::vector<double> step_ms, forward_ms, backward_ms;
  int64_t out_bytes = 0;  // per step, from the LMS counters (the last step)
  int64_t in_bytes = 0;
#ifdef LMS_BENCH_POLICY_STATS
  // What LMS's policies ahead of need did in the last step (where time went).
  c10::lms::PolicyCounters policy;
#endif
  int64_t reserved_peak = 0;
  // Host wall time of each step, from the first enqueue to the end of the last event's wait.
  std::vector<double> host_step_ms;
#ifdef LMS_BENCH_HOST_POOL_STATS
  // The host pool over the timed steps: chunks pinned on a page-out's path and by the growth
  // thread, page-outs ahead skipped for want of a free range; pinned bytes held at the end.
  int64_t chunks_pinned_on_demand = 0, chunks_pinned_ahead = 0, ahead_without_room = 0;
  int64_t host_held_bytes = 0;
#endif
  std::vector<uint32_t> grad;  // the final gradient, for the checks
};

#ifdef LMS_BENCH_POLICY_STATS
c10::lms::PolicyCounters policy_delta(const c10::lms::PolicyCounters& before,
                                      const c10::lms::PolicyCounters& after) {
  c10::lms::PolicyCounters delta;
  for (auto field : {&c10::lms::PolicyCounters::paged_out_ahead,
                     &c10::lms::PolicyCounters::paged_out_ahead_bytes,
                     &c10::lms::PolicyCounters::page_out_waits,
                     &c10::lms::PolicyCounters::clean_reclaims,
                     &c10::lms::PolicyCounters::clean_reclaimed_bytes,
                     &c10::lms::PolicyCounters::prefetched,
                     &c10::lms::PolicyCounters::prefetched_bytes,
                     &c10::lms::PolicyCounters::prefetch_hits,
                     &c10::lms::PolicyCounters::prefetch_misses,
                     &c10::lms::PolicyCounters::prefetch_wasted,
                     &c10::lms::PolicyCounters::prefetch_wasted_bytes,
                     &c10::lms::PolicyCounters::page_in_wait_us}) {
    delta.*field = after.*field - before.*field;
  }
  return delta;
}
#endif

StepTimes run_loop(const Settings& s, int layers, size_t bytes) {
  const c10::DeviceIndex device = static_cast<c10::DeviceIndex>(s.device);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const size_t words = bytes / sizeof(uint32_t);
  StepTimes times;
  StoragePtr grad = make_storage(bytes);
  pin(grad);
  Caching::resetPeakStats(device);
  cudaEvent_t start = nullptr, middle = nullptr, stop = nullptr;
  LMS_BENCH_CUDA(cudaEventCreate(&start));
  LMS_BENCH_CUDA(cudaEventCreate(&middle));
  LMS_BENCH_CUDA(cudaEventCreate(&stop));
#ifdef LMS_BENCH_HOST_POOL_STATS
  auto& pool = c10::cuda::lms::HostPool::instance();
  int64_t on_demand_before = 0, ahead_before = 0, without_room_before = 0;
#endif
  for (int step = -s.warmup; step < s.steps; ++step) {
#ifdef LMS_BENCH_HOST_POOL_STATS
    if (step == 0) {
      on_demand_before = pool.chunks_pinned_on_demand();
      ahead_before = pool.chunks_pinned_ahead();
      without_room_before = pool.ahead_without_room();
    }
#endif
    auto before = Caching::getDeviceStats(device);
    auto host_start = std::chrono::steady_clock::now();
    LMS_BENCH_CUDA(cudaEventRecord(start, stream));
    std::vector<StoragePtr> activations;
    for (int layer = 0; layer < layers; ++layer) {
      activations.push_back(make_storage(bytes));
      pin(activations.back());
      const uint32_t* in = layer == 0
          ? nullptr
          : static_cast<const uint32_t*>(activations[layer - 1]->data());
      LMS_BENCH_CUDA(forward_layer(
          in, static_cast<uint32_t*>(writable_data(*activations.back())), words, layer,
          Mixing{s.rounds, s.data_rounds}, stream));
      if (layer > 0) {
        unpin(activations[layer - 1]);
      }
    }
    unpin(activations.back());
    LMS_BENCH_CUDA(cudaEventRecord(middle, stream));
    LMS_BENCH_CUDA(init_grad(static_cast<uint32_t*>(writable_data(*grad)), words, stream));
    for (int layer = layers - 1; layer >= 0; --layer) {
      pin(activations[layer]);
      LMS_BENCH_CUDA(backward_layer(static_cast<const uint32_t*>(activations[layer]->data()),
                                    static_cast<uint32_t*>(writable_data(*grad)), words,
                                    Mixing{s.rounds, s.data_rounds}, stream));
      unpin(activations[layer]);
      activations[layer].reset();
    }
    LMS_BENCH_CUDA(cudaEventRecord(stop, stream));
    LMS_BENCH_CUDA(cudaEventSynchronize(stop));
    double host_ms = std::chrono::duration<double, std::milli>(
        std::chrono::steady_clock::now() - host_start).count();
    float step_ms = 0, forward_ms = 0, backward_ms = 0;
    LMS_BENCH_CUDA(cudaEventElapsedTime(&step_ms, start, stop));
    LMS_BENCH_CUDA(cudaEventElapsedTime(&forward_ms, start, middle));
    LMS_BENCH_CUDA(cudaEventElapsedTime(&backward_ms, middle, stop));
    auto after = Caching::getDeviceStats(device);
    times.out_bytes = after.reclaimed_bytes - before.reclaimed_bytes;
    times.in_bytes = after.paged_in_bytes - before.paged_in_bytes;
#ifdef LMS_BENCH_POLICY_STATS
    // Bytes copied out: a clean page-out (the host copy was current) copies nothing.
    times.out_bytes -= after.lms_policy.clean_reclaimed_bytes -
        before.lms_policy.clean_reclaimed_bytes;
    times.policy = policy_delta(before.lms_policy, after.lms_policy);
#endif
    if (step >= 0) {
      times.step_ms.push_back(step_ms);
      times.forward_ms.push_back(forward_ms);
      times.backward_ms.push_back(backward_ms);
      times.host_step_ms.push_back(host_ms);
    }
  }
#ifdef LMS_BENCH_HOST_POOL_STATS
  times.chunks_pinned_on_demand = pool.chunks_pinned_on_demand() - on_demand_before;
  times.chunks_pinned_ahead = pool.chunks_pinned_ahead() - ahead_before;
  times.ahead_without_room = pool.ahead_without_room() - without_room_before;
  times.host_held_bytes = static_cast<int64_t>(pool.held_bytes());
#endif
  times.reserved_peak = aggregate_peak(Caching::getDeviceStats(device).reserved_bytes);
  times.grad.resize(words);
  LMS_BENCH_CUDA(cudaMemcpy(times.grad.data(), grad->data(), bytes, cudaMemcpyDeviceToHost));
  unpin(grad);
  grad.reset();
  LMS_BENCH_CUDA(cudaEventDestroy(start));
  LMS_BENCH_CUDA(cudaEventDestroy(middle));
  LMS_BENCH_CUDA(cudaEventDestroy(stop));
  Caching::emptyCache();
  return times;
}

void write_times(Json& json, const std::string& key, const StepTimes& t) {
  json.begin_object(key);
  json.field("step_ms", summarize(t.step_ms).median_ms);
  json.field("forward_ms", summarize(t.forward_ms).median_ms);
  json.field("backward_ms", summarize(t.backward_ms).median_ms);
  json.field("step_min_ms", summarize(t.step_ms).min_ms);
  json.field("step_max_ms", summarize(t.step_ms).max_ms);
  json.field("out_bytes_per_step", static_cast<long long>(t.out_bytes));
  json.field("in_bytes_per_step", static_cast<long long>(t.in_bytes));
  json.field("reserved_peak_bytes", static_cast<long long>(t.reserved_peak));
  if (!t.host_step_ms.empty()) {
    json.field("host_step_ms", summarize(t.host_step_ms).median_ms);
  }
#ifdef LMS_BENCH_HOST_POOL_STATS
  json.begin_object("host_pool");
  json.field("chunks_pinned_on_demand", static_cast<long long>(t.chunks_pinned_on_demand));
  json.field("chunks_pinned_ahead", static_cast<long long>(t.chunks_pinned_ahead));
  json.field("ahead_without_room", static_cast<long long>(t.ahead_without_room));
  json.field("held_bytes", static_cast<long long>(t.host_held_bytes));
  json.end_object();
#endif
#ifdef LMS_BENCH_POLICY_STATS
  json.begin_object("policy");
  json.field("paged_out_ahead", static_cast<long long>(t.policy.paged_out_ahead));
  json.field("paged_out_ahead_bytes", static_cast<long long>(t.policy.paged_out_ahead_bytes));
  json.field("page_out_waits", static_cast<long long>(t.policy.page_out_waits));
  json.field("clean_reclaims", static_cast<long long>(t.policy.clean_reclaims));
  json.field("clean_reclaimed_bytes", static_cast<long long>(t.policy.clean_reclaimed_bytes));
  json.field("prefetched", static_cast<long long>(t.policy.prefetched));
  json.field("prefetch_hits", static_cast<long long>(t.policy.prefetch_hits));
  json.field("prefetch_misses", static_cast<long long>(t.policy.prefetch_misses));
  json.field("prefetch_wasted", static_cast<long long>(t.policy.prefetch_wasted));
  json.field("page_in_wait_us", static_cast<long long>(t.policy.page_in_wait_us));
  json.end_object();
#endif
  json.begin_array("step_samples_ms");
  for (double sample : t.step_ms) {
    json.value(sample);
  }
  json.end_array();
  json.end_object();
}

int run(int argc, char** argv) {
  bool help = false;
  Settings s = parse(argc, argv, &help);
  if (help) {
    return kExitOk;
  }
  require_device(s.device);
  register_primary_context_query();
  const c10::DeviceIndex device = static_cast<c10::DeviceIndex>(s.device);
  Caching::init(c10::cuda::device_count());
  c10::cuda::set_device(device);
  lms::set_host_limit(0);
  const size_t bytes = activation_bytes(s);
  if (bytes == 0) {
    throw UsageError("--limit / --layers-per-limit leaves activations under 2 MiB");
  }
  size_t device_free = 0, device_total = 0;
  LMS_BENCH_CUDA(cudaMemGetInfo(&device_free, &device_total));
  if (s.limit + 2 * bytes > device_free) {
    throw UsageError("--limit " + format_size(s.limit) + " does not fit in the " +
                     format_size(device_free) + " free on the device");
  }
  const Bandwidth bandwidth = measure_copy_bandwidth(bytes);

  Json json;
  json.begin_object();
  json.field("benchmark", "oversubscription");
  json.field("schema", 1);
  json.field("simulated", kSimulatedRuntime);
  write_device_info(json, s.device);
  write_timing(json, simulated_calibration());
  json.begin_object("settings");
  json.field("limit_bytes", s.limit);
  json.field("activation_bytes", bytes);
  json.field("layers_per_limit", s.layers_per_limit);
  json.field("rounds", s.rounds);
  json.field("data_rounds", s.data_rounds);
  json.field("steps", s.steps);
  json.field("warmup", s.warmup);
  json.end_object();
  json.begin_object("bandwidth");
  json.field("d2h_gbps", bandwidth.d2h_bytes_per_ms / 1e6);
  json.field("h2d_gbps", bandwidth.h2d_bytes_per_ms / 1e6);
  json.field("copy_bytes", bytes);
  json.end_object();
  json.begin_array("results");

  size_t failures = 0;
  std::printf("%4s %7s %12s %12s %12s %10s %10s\n", "k", "layers", "lms ms", "oracle ms",
              "bound ms", "bound eff", "overhead");
  for (long k : s.factors) {
    const int layers = static_cast<int>(k) * s.layers_per_limit;
    const size_t total = bytes * static_cast<size_t>(layers);

    lms::set_enabled(true);
    lms::set_limit(s.limit);
    StepTimes with_lms = run_loop(s, layers, bytes);
    lms::set_enabled(false);
    lms::set_limit(0);
    size_t host_bad = gradient_mismatches(with_lms.grad, layers, s.data_rounds);

    std::optional<StepTimes> oracle;
    LMS_BENCH_CUDA(cudaMemGetInfo(&device_free, &device_total));
    bool oracle_fits = total + 2 * bytes <=
        static_cast<size_t>(kOracleMemoryShare * static_cast<double>(device_free));
    if (s.oracle && oracle_fits) {
      oracle = run_loop(s, layers, bytes);
    }
    bool same_as_oracle = !oracle || oracle->grad == with_lms.grad;
    bool data_ok = host_bad == 0 && same_as_oracle;
    failures += data_ok ? 0 : 1;

    std::optional<OraclePhases> phases;
    if (oracle) {
      phases = oracle_phases(oracle->forward_ms, oracle->backward_ms);
    }
    const Bound bound = bandwidth_bound(phases, with_lms.out_bytes, with_lms.in_bytes, total,
                                        s.limit, bandwidth);
    double bound_ms = bound.step_ms;
    double lms_ms = summarize(with_lms.step_ms).median_ms;

    json.begin_object();
    json.field("k", static_cast<long long>(k));
    json.field("layers", layers);
    json.field("activation_total_bytes", total);
    write_times(json, "lms", with_lms);
    if (oracle) {
      write_times(json, "oracle", *oracle);
    } else {
      json.null_field("oracle");
      json.field("oracle_skipped", s.oracle ? "activations do not fit on the device"
                                            : "--no-oracle");
    }
    write_bound(json, bound);
    json.field("bound_efficiency", bound_ms / lms_ms);
    if (oracle) {
      json.field("overhead_vs_oracle", lms_ms / summarize(oracle->step_ms).median_ms - 1.0);
    } else {
      json.null_field("overhead_vs_oracle");
    }
    json.field("host_reference_mismatches", host_bad);
    json.field("matches_oracle", oracle ? same_as_oracle : true);
    json.field("data_ok", data_ok);
    json.end_object();

    std::printf("%4ld %7d %12.2f %12s %12.2f %10.3f %10s%s\n", k, layers, lms_ms,
                oracle ? std::to_string(summarize(oracle->step_ms).median_ms).c_str() : "-",
                bound_ms, bound_ms / lms_ms,
                oracle ? std::to_string(lms_ms / summarize(oracle->step_ms).median_ms - 1.0)
                             .c_str()
                       : "-",
                data_ok ? "" : "  DATA MISMATCH");
    std::fflush(stdout);
  }
  finish_report(json, failures, s.out);
  return kExitOk;
}

} // namespace

int main(int argc, char** argv) {
  return lms_bench::run_program(kProgram, [&] { return run(argc, argv); });
}
