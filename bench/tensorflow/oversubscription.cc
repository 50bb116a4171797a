// lms_tf_bench_oversub: TensorFlow's LMS under the forward/backward loop of
// bench/oversubscription.cpp (the PyTorch benchmark), so the two series'
// figures compare: activations totalling k times the GPU allocator's memory
// (k = 1, 2, 4, 8), against the same loop with no limit and against the
// bandwidth bound (docs/gpu.md section 5).
//
// The pieces are TensorFlow's own: the GPU BFC allocator with LMS over the
// StreamExecutor CUDA platform of the wheel's framework library, the series'
// copy engine (GpuLmsBackend) and EventMgr, pinned host memory from a BFC
// pool over se::DeviceHostAllocator, and tensors. A "kernel" pins its inputs
// and output in a tsl::lms::PinSet, as OpKernelContext does, pages them in,
// and queues the layer on the compute stream.
//
// The layers are the PyTorch benchmark's (bench/kernels.h), launched as host
// kernels of lmsforge's simulated CUDA runtime that declare what they would do
// on the GPU: that sets their virtual duration. So the program runs on the
// simulator only (the core-sim level builds and runs it); on a GPU it would
// need the kernels as PTX, which the TensorFlow bundle's compiler cannot make.
//
// Each k runs twice with LMS: with its policies (TF_LMS_CONF as set; all on by
// default) and on demand (sync_mode:3, unless --no-on-demand), so the report
// shows what the policies buy.
//
// The bound per step is
//   max(T_forward, S_out / B_d2h) + max(T_backward, S_in / B_h2d)
// with T_* from the no-limit run, S_* the bytes LMS moved (its statistics) and
// B_* the raw pinned copy bandwidth at the activation size. The gradient is
// checked against a host reference on sampled elements and, where the
// no-limit run fits, bit for bit against it.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common.h"
#include "kernels.h"
#include "oversubscription_bound.h"
#include "pattern.h"
#include "tensorflow/compiler/xla/stream_executor/device_host_allocator.h"
#include "tensorflow/compiler/xla/stream_executor/device_mem_allocator.h"
#include "tensorflow/compiler/xla/stream_executor/multi_platform_manager.h"
#include "tensorflow/compiler/xla/stream_executor/platform.h"
#include "tensorflow/compiler/xla/stream_executor/stream.h"
#include "tensorflow/compiler/xla/stream_executor/stream_executor_internal.h"
#include "tensorflow/compiler/xla/stream_executor/stream_executor_pimpl.h"
#include "tensorflow/core/common_runtime/device/device_event_mgr.h"
#include "tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.h"
#include "tensorflow/core/framework/lms_tensor.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/protobuf/config.pb.h"
#include "tensorflow/tsl/framework/bfc_allocator.h"
#include "tensorflow/tsl/framework/lms/lms_conf.h"
#include "tensorflow/tsl/framework/lms/lms_manager.h"
#include "tensorflow/tsl/framework/lms/pin_set.h"

namespace {

using namespace lms_bench;
namespace tf = tensorflow;
namespace se = ::stream_executor;

constexpr const char* kProgram = "lms_tf_bench_oversub";
// Device memory left free beside a no-limit run (the gradient, the
// bandwidth buffers, the allocator's rounding).
constexpr double kOracleMemoryShare = 0.85;
// The pinned host pool LMS pages out to may grow to this many times the
// activations' total: TF's GPU host allocator is a BFC pool that grows.
constexpr size_t kHostPoolHeadroom = 2;

struct Settings {
  std::string out;
  size_t limit;
  std::vector<long> factors;
  int layers_per_limit;
  int rounds;
  int data_rounds;
  int steps;
  int warmup;
  bool oracle;
  bool on_demand;
};

Settings parse(int argc, char** argv, bool* help) {
  Args args(kProgram,
            "Times TensorFlow's LMS on a forward/backward loop over activations of k x the GPU\n"
            "allocator's memory, against the loop without a limit and the bandwidth bound;\n"
            "writes JSON. Runs on lmsforge's simulated CUDA runtime.");
  args.option("out", "", "JSON file to write (required)");
  args.option("limit", "1G", "the GPU BFC allocator's memory (the LMS limit)");
  args.option("factors", "1,2,4,8", "oversubscription factors k, comma-separated, 1..64");
  args.option("layers-per-limit", "8", "activations per limit's worth of memory (sets their size)");
  args.option("rounds", "64", "mixing rounds per element and layer (compute per byte)");
  args.option("data-rounds", "",
              "rounds of --rounds the simulator's host computes into the data (default: all); "
              "the simulated device takes the time of --rounds");
  args.option("steps", "10", "timed steps per configuration (the median is reported)");
  args.option("warmup", "2", "untimed steps per configuration");
  args.flag("no-oracle", "skip the runs without a limit");
  args.flag("no-on-demand", "skip the runs with every LMS policy off (TF_LMS_CONF sync_mode:3)");
  args.flag("short", "the PyTorch benchmark's smoke run: limit 80M (8 activations of 10 MiB per "
                     "limit), k = 1,2,4,8, 64 rounds, 2 of them in the data, 1 step, 1 warm-up");
  *help = !args.parse(argc, argv);
  Settings s;
  if (*help) return s;
  s.out = args.get("out");
  if (s.out.empty()) throw UsageError("--out is required");
  s.limit = parse_size(args.get_or_short("limit", "80M"));
  if (s.limit < 64 * kMiB) throw UsageError("--limit: at least 64M");
  s.factors = parse_int_list(args.get_or_short("factors", "1,2,4,8"), 1, 64, "factors");
  s.layers_per_limit = static_cast<int>(
      parse_int(args.get_or_short("layers-per-limit", "8"), 2, 1024, "layers-per-limit"));
  s.rounds = static_cast<int>(parse_int(args.get("rounds"), 1, 100000, "rounds"));
  const std::string data_rounds = args.get_or_short("data-rounds", "2");
  s.data_rounds = data_rounds.empty()
      ? s.rounds
      : static_cast<int>(parse_int(data_rounds, 1, s.rounds, "data-rounds"));
  s.steps = static_cast<int>(parse_int(args.get_or_short("steps", "1"), 1, 10000, "steps"));
  s.warmup = static_cast<int>(parse_int(args.get_or_short("warmup", "1"), 0, 1000, "warmup"));
  s.oracle = !args.given("no-oracle");
  s.on_demand = !args.given("no-on-demand");
  return s;
}

// A limit's worth of memory holds `layers_per_limit` activations, in whole
// 2 MiB pages as in the PyTorch benchmark (so both move the same bytes).
size_t activation_bytes(const Settings& s) {
  size_t bytes = s.limit / static_cast<size_t>(s.layers_per_limit);
  return bytes / (2 * kMiB) * (2 * kMiB);
}

se::StreamExecutor* executor_for(int ordinal) {
  auto platform = se::MultiPlatformManager::PlatformWithName("CUDA");
  if (!platform.ok()) {
    throw NoCudaDevice("StreamExecutor has no CUDA platform: " +
                       std::string(platform.status().message()));
  }
  if (platform.value()->VisibleDeviceCount() <= ordinal) {
    throw NoCudaDevice("no CUDA device visible to StreamExecutor");
  }
  auto executor = platform.value()->ExecutorForDevice(ordinal);
  if (!executor.ok()) {
    throw NoCudaDevice("no StreamExecutor for device 0: " +
                       std::string(executor.status().message()));
  }
  return executor.value();
}

cudaStream_t cuda_stream(se::Stream* stream) {
  // On CUDA a StreamExecutor stream's handle is the CUstream, which the
  // runtime API takes as a cudaStream_t.
  return static_cast<cudaStream_t>(stream->implementation()->GpuStreamHack());
}

// One GPU as TensorFlow's runtime sets it up: a compute stream, a pinned host
// pool, and the GPU BFC allocator of `memory` bytes, with LMS or without.
struct Gpu {
  // `on_demand`: LMS with every policy off (sync_mode 3), whatever TF_LMS_CONF says.
  Gpu(se::StreamExecutor* executor, size_t memory, size_t host_memory, bool lms,
      bool on_demand = false)
      : executor(executor), compute(std::make_unique<se::Stream>(executor)) {
    compute->Init();
    if (!compute->ok()) throw CheckFailed("could not create the compute stream");
    tsl::BFCAllocator::Options host_options;
    host_options.allow_growth = true;
    host_options.allow_retry_on_failure = false;
    host = std::make_unique<tsl::BFCAllocator>(
        std::make_unique<se::DeviceHostAllocator>(executor, 0,
                                                  std::vector<tsl::SubAllocator::Visitor>(),
                                                  std::vector<tsl::SubAllocator::Visitor>()),
        host_memory, "lms_bench_host", host_options);
    tf::GPUBFCAllocator::Options options;
    options.allow_growth = false;
    options.garbage_collection = false;
    options.allow_retry_on_failure = false;
    bfc = std::make_unique<tf::GPUBFCAllocator>(
        std::make_unique<se::DeviceMemAllocator>(
            executor, tsl::PlatformDeviceId(0), /*use_unified_memory=*/false,
            std::vector<tsl::SubAllocator::Visitor>(), std::vector<tsl::SubAllocator::Visitor>()),
        memory, "GPU_0_bfc", options);
    if (lms) {
      tf::EventMgr* event_mgr =
          tf::EventMgrFactory::Singleton()->GetEventMgr(executor, tf::GPUOptions());
      const tf::Status status = bfc->EnableLms(executor, compute.get(), host.get(), event_mgr);
      if (!status.ok()) throw CheckFailed("EnableLms: " + std::string(status.message()));
      if (on_demand) {
        tsl::lms::LmsPolicy policy;
        const tf::Status parsed = tsl::lms::ParseLmsConf("sync_mode:3", kProgram, &policy);
        if (!parsed.ok()) throw CheckFailed(std::string(parsed.message()));
        bfc->GetLmsManager()->SetPolicy(policy);
      }
    }
  }

  ~Gpu() { executor->SynchronizeAllActivity(); }

  tsl::lms::LmsStats stats() {
    tsl::lms::LmsManager* lms = bfc->GetLmsManager();
    return lms != nullptr ? lms->GetStats() : tsl::lms::LmsStats();
  }

  se::StreamExecutor* const executor;
  const std::unique_ptr<se::Stream> compute;
  std::unique_ptr<tsl::BFCAllocator> host;
  std::unique_ptr<tf::GPUBFCAllocator> bfc;
};

tf::Tensor new_tensor(Gpu& gpu, size_t bytes) {
  tf::Tensor t(gpu.bfc.get(), tf::DT_INT32,
               tf::TensorShape({static_cast<int64_t>(bytes / sizeof(int32_t))}));
  if (!t.IsInitialized()) {
    throw CheckFailed("the GPU allocator could not allocate " + format_size(bytes) +
                      (gpu.bfc->GetLmsManager() != nullptr ? " even with LMS" : ""));
  }
  return t;
}

uint32_t* words_of(const tf::Tensor& t) {
  return reinterpret_cast<uint32_t*>(const_cast<char*>(t.tensor_data().data()));
}

// What an OpKernelContext does for a kernel's tensors: pins them for the
// kernel's life and pages in whatever LMS paged out. Null tensors are skipped.
class KernelPins {
 public:
  explicit KernelPins(std::initializer_list<const tf::Tensor*> tensors) {
    for (const tf::Tensor* t : tensors) {
      if (t == nullptr) continue;
      if (tsl::lms::ManagedBuffer* buffer = tf::LmsTensorBuffers::Managed(*t)) {
        pins_.Pin(buffer);
      }
    }
    const tf::Status status = pins_.MakeResident();
    if (!status.ok()) throw CheckFailed("LMS could not page in: " + std::string(status.message()));
  }

 private:
  tsl::lms::PinSet pins_;
};

struct StepTimes {
  std::vector<double> step_ms, forward_ms, backward_ms;
  int64_t out_bytes = 0;  // per step, from the LMS statistics (the last step)
  int64_t in_bytes = 0;
  int64_t pageouts = 0, pageins = 0;
  int64_t prefetches = 0, prefetch_hits = 0, prefetch_wasted = 0;
  int64_t pageouts_ahead = 0, pageouts_ahead_used = 0, pageouts_ahead_wasted = 0;
  int64_t compute_wait_us = 0;  // LMS's own timing of compute's waits for copies
  std::vector<uint32_t> grad;
};

class Events {
 public:
  Events() {
    for (cudaEvent_t* event : {&start, &middle, &stop}) LMS_BENCH_CUDA(cudaEventCreate(event));
  }
  ~Events() {
    for (cudaEvent_t event : {start, middle, stop}) (void)cudaEventDestroy(event);
  }
  static double ms(cudaEvent_t from, cudaEvent_t to) {
    float elapsed = 0;
    LMS_BENCH_CUDA(cudaEventElapsedTime(&elapsed, from, to));
    return elapsed;
  }
  cudaEvent_t start = nullptr, middle = nullptr, stop = nullptr;
};

StepTimes run_loop(const Settings& s, Gpu& gpu, int layers, size_t bytes) {
  cudaStream_t stream = cuda_stream(gpu.compute.get());
  const size_t words = bytes / sizeof(uint32_t);
  const Mixing mixing{s.rounds, s.data_rounds};
  StepTimes times;
  tf::Tensor grad = new_tensor(gpu, bytes);
  KernelPins grad_pinned({&grad});  // the optimizer's state: resident all along
  Events events;
  for (int step = -s.warmup; step < s.steps; ++step) {
    const tsl::lms::LmsStats before = gpu.stats();
    LMS_BENCH_CUDA(cudaEventRecord(events.start, stream));
    std::vector<tf::Tensor> activations;
    for (int layer = 0; layer < layers; ++layer) {
      activations.push_back(new_tensor(gpu, bytes));
      const tf::Tensor* in = layer == 0 ? nullptr : &activations[layer - 1];
      KernelPins kernel({in, &activations.back()});
      LMS_BENCH_CUDA(forward_layer(in != nullptr ? words_of(*in) : nullptr,
                                   words_of(activations.back()), words, layer, mixing, stream));
    }
    LMS_BENCH_CUDA(cudaEventRecord(events.middle, stream));
    LMS_BENCH_CUDA(init_grad(words_of(grad), words, stream));
    for (int layer = layers - 1; layer >= 0; --layer) {
      {
        KernelPins kernel({&activations[layer]});
        LMS_BENCH_CUDA(backward_layer(words_of(activations[layer]), words_of(grad), words,
                                      mixing, stream));
      }
      activations[layer] = tf::Tensor();
    }
    LMS_BENCH_CUDA(cudaEventRecord(events.stop, stream));
    LMS_BENCH_CUDA(cudaEventSynchronize(events.stop));
    const tsl::lms::LmsStats after = gpu.stats();
    times.out_bytes = after.bytes_reclaimed - before.bytes_reclaimed;
    times.in_bytes = after.bytes_paged_in - before.bytes_paged_in;
    times.pageins = after.num_pageins - before.num_pageins;
    times.prefetches = after.num_prefetches - before.num_prefetches;
    times.prefetch_hits = after.num_prefetch_hits - before.num_prefetch_hits;
    times.prefetch_wasted = after.num_prefetch_wasted - before.num_prefetch_wasted;
    times.pageouts_ahead = after.num_pageouts_ahead - before.num_pageouts_ahead;
    times.compute_wait_us =
        after.compute_wait_for_copies_us - before.compute_wait_for_copies_us;
    times.pageouts_ahead_used = after.num_pageouts_ahead_used - before.num_pageouts_ahead_used;
    times.pageouts_ahead_wasted =
        after.num_pageouts_ahead_wasted - before.num_pageouts_ahead_wasted;
    times.pageouts = (after.num_single_reclaims - before.num_single_reclaims) +
                     (after.num_full_reclaims - before.num_full_reclaims);
    if (step >= 0) {
      times.step_ms.push_back(Events::ms(events.start, events.stop));
      times.forward_ms.push_back(Events::ms(events.start, events.middle));
      times.backward_ms.push_back(Events::ms(events.middle, events.stop));
    }
  }
  times.grad.resize(words);
  LMS_BENCH_CUDA(cudaMemcpyAsync(times.grad.data(), words_of(grad), bytes,
                                 cudaMemcpyDeviceToHost, stream));
  LMS_BENCH_CUDA(cudaStreamSynchronize(stream));
  return times;
}

void write_times(Json& json, const std::string& key, const StepTimes& t) {
  json.begin_object(key);
  json.field("step_ms", summarize(t.step_ms).median_ms);
  json.field("forward_ms", summarize(t.forward_ms).median_ms);
  json.field("backward_ms", summarize(t.backward_ms).median_ms);
  json.field("out_bytes_per_step", static_cast<long long>(t.out_bytes));
  json.field("in_bytes_per_step", static_cast<long long>(t.in_bytes));
  json.field("reclaims_per_step", static_cast<long long>(t.pageouts));
  json.field("pageins_per_step", static_cast<long long>(t.pageins));
  json.field("prefetches_per_step", static_cast<long long>(t.prefetches));
  json.field("prefetch_hits_per_step", static_cast<long long>(t.prefetch_hits));
  json.field("prefetch_wasted_per_step", static_cast<long long>(t.prefetch_wasted));
  json.field("pageouts_ahead_per_step", static_cast<long long>(t.pageouts_ahead));
  json.field("compute_wait_ms_per_step", static_cast<double>(t.compute_wait_us) / 1000.0);
  json.field("pageouts_ahead_used_per_step", static_cast<long long>(t.pageouts_ahead_used));
  json.field("pageouts_ahead_wasted_per_step", static_cast<long long>(t.pageouts_ahead_wasted));
  json.begin_array("step_samples_ms");
  for (double sample : t.step_ms) json.value(sample);
  json.end_array();
  json.end_object();
}

int run(int argc, char** argv) {
  bool help = false;
  const Settings s = parse(argc, argv, &help);
  if (help) return kExitOk;
  const size_t bytes = activation_bytes(s);
  if (bytes == 0) throw UsageError("--limit / --layers-per-limit leaves activations under 2 MiB");
  se::StreamExecutor* executor = executor_for(0);
  require_device(0);
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
  json.field("framework", "tensorflow");
  json.field("schema", 1);
  json.field("simulated", kSimulatedRuntime);
  write_device_info(json, 0);
  write_timing(json, simulated_calibration());
  json.begin_object("settings");
  json.field("limit_bytes", s.limit);
  json.field("activation_bytes", bytes);
  json.field("layers_per_limit", s.layers_per_limit);
  json.field("rounds", s.rounds);
  json.field("data_rounds", s.data_rounds);
  json.field("steps", s.steps);
  json.field("warmup", s.warmup);
  const char* conf = std::getenv("TF_LMS_CONF");
  json.field("tf_lms_conf", conf != nullptr ? conf : "");
  json.end_object();
  json.begin_object("bandwidth");
  json.field("d2h_gbps", bandwidth.d2h_bytes_per_ms / 1e6);
  json.field("h2d_gbps", bandwidth.h2d_bytes_per_ms / 1e6);
  json.field("copy_bytes", bytes);
  json.end_object();
  json.begin_array("results");

  size_t failures = 0;
  std::printf("%4s %7s %12s %12s %12s %10s %14s\n", "k", "layers", "lms ms", "oracle ms",
              "bound ms", "bound eff", "on-demand eff");
  for (long k : s.factors) {
    const int layers = static_cast<int>(k) * s.layers_per_limit;
    const size_t total = bytes * static_cast<size_t>(layers);
    StepTimes with_lms;
    {
      Gpu gpu(executor, s.limit, kHostPoolHeadroom * total, /*lms=*/true);
      with_lms = run_loop(s, gpu, layers, bytes);
    }
    size_t host_bad = gradient_mismatches(with_lms.grad, layers, s.data_rounds);
    std::optional<StepTimes> on_demand;
    if (s.on_demand) {
      Gpu gpu(executor, s.limit, kHostPoolHeadroom * total, /*lms=*/true, /*on_demand=*/true);
      on_demand = run_loop(s, gpu, layers, bytes);
      host_bad += gradient_mismatches(on_demand->grad, layers, s.data_rounds);
    }
    std::optional<StepTimes> oracle;
    LMS_BENCH_CUDA(cudaMemGetInfo(&device_free, &device_total));
    const size_t oracle_memory = total + 4 * bytes;
    if (s.oracle && oracle_memory <= static_cast<size_t>(kOracleMemoryShare *
                                                         static_cast<double>(device_free))) {
      Gpu gpu(executor, oracle_memory, 64 * kMiB, /*lms=*/false);
      oracle = run_loop(s, gpu, layers, bytes);
    }
    const bool same_as_oracle = (!oracle || oracle->grad == with_lms.grad) &&
                                (!oracle || !on_demand || oracle->grad == on_demand->grad);
    const bool data_ok = host_bad == 0 && same_as_oracle;
    failures += data_ok ? 0 : 1;

    std::optional<OraclePhases> phases;
    if (oracle) {
      phases = oracle_phases(oracle->forward_ms, oracle->backward_ms);
    }
    const Bound bound = bandwidth_bound(phases, with_lms.out_bytes, with_lms.in_bytes, total,
                                        s.limit, bandwidth);
    const double bound_ms = bound.step_ms;
    const double lms_ms = summarize(with_lms.step_ms).median_ms;
    // On demand moves the same bytes or more: its own bound.
    std::optional<double> on_demand_efficiency;
    if (on_demand) {
      on_demand_efficiency =
          bandwidth_bound(phases, on_demand->out_bytes, on_demand->in_bytes, total, s.limit,
                          bandwidth).step_ms /
          summarize(on_demand->step_ms).median_ms;
    }

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
    if (on_demand) {
      write_times(json, "on_demand", *on_demand);
    } else {
      json.null_field("on_demand");
    }
    write_bound(json, bound);
    json.field("bound_efficiency", bound_ms / lms_ms);
    if (on_demand_efficiency) {
      json.field("on_demand_bound_efficiency", *on_demand_efficiency);
    } else {
      json.null_field("on_demand_bound_efficiency");
    }
    json.field("host_reference_mismatches", host_bad);
    json.field("matches_oracle", oracle ? same_as_oracle : true);
    json.field("data_ok", data_ok);
    json.end_object();

    std::printf("%4ld %7d %12.3f %12s %12.3f %10.3f %14s%s\n", k, layers, lms_ms,
                oracle ? absl::StrCat(summarize(oracle->step_ms).median_ms).c_str() : "-",
                bound_ms, bound_ms / lms_ms,
                on_demand_efficiency ? absl::StrCat(*on_demand_efficiency).c_str() : "-",
                data_ok ? "" : "  DATA MISMATCH");
    std::fflush(stdout);
  }
  finish_report(json, failures, s.out);
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  return lms_bench::run_program(kProgram, [&] { return run(argc, argv); });
}
