// lms_bench_copy: LMS page-out and page-in throughput against raw pinned
// cudaMemcpyAsync, over storage sizes from 4 KiB to 1 GiB (docs/gpu.md).
//
// For each size S, COUNT = clamp(target-bytes / S, 1, max-count) buffers are
// moved per repeat, so that small sizes are not timed one launch at a time.
// Each repeat times, in this order and on the same sizes:
//   raw_d2h  COUNT cudaMemcpyAsync device -> pinned host, one stream;
//   raw_h2d  COUNT cudaMemcpyAsync pinned host -> device;
//   lms_out  reclaim_inactive(): page-out of COUNT inactive storages, timed
//            with events on the LMS page-out stream (host work included);
//   lms_in   pin() of each reclaimed storage, timed with events on the
//            compute stream, which waits for every page-in.
// Every buffer holds a pattern that is checked on the device after each
// repeat; the program exits 1 on any mismatch.

#include "common.h"
#include "kernels.h"
#include "primary_context.h"
#include "torch_compat.h"

#include <c10/core/LargeModelSupport.h>
#include <c10/core/StorageImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDALargeModelSupport.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {

using namespace lms_bench;
namespace Caching = c10::cuda::CUDACachingAllocator;
namespace lms = c10::cuda::lms;
using StoragePtr = c10::intrusive_ptr<c10::StorageImpl>;

constexpr const char* kProgram = "lms_bench_copy";
constexpr size_t kGoalMinSize = 16 * kMiB;
constexpr double kGoalRatio = 0.9;

struct Settings {
  std::string out;
  std::vector<size_t> sizes;
  int repeats;
  int warmup;
  size_t target_bytes;
  size_t max_count;
  int device;
};

struct SizeResult {
  size_t size;
  size_t count;
  std::vector<double> raw_d2h, raw_h2d, lms_out, lms_in;
  unsigned long long mismatches = 0;
};

Settings parse(int argc, char** argv, bool* help) {
  Args args(kProgram,
            "Measures LMS page-out/page-in throughput against raw pinned cudaMemcpyAsync\n"
            "and writes the results as JSON (plot them with bench/lmsbench.py plot).");
  args.option("out", "", "JSON file to write (required)");
  args.option("sizes", "4K,16K,64K,256K,1M,4M,16M,64M,256M,1G",
              "storage sizes, comma-separated, 4K..1G");
  args.option("repeats", "20", "timed repeats per size (the median is reported)");
  args.option("warmup", "3", "untimed repeats per size before timing");
  args.option("target-bytes", "256M", "bytes moved per repeat and direction, at most");
  args.option("max-count", "256", "storages per repeat, at most");
  args.option("device", "0", "CUDA device index");
  args.flag("short", "a smoke run (sizes 4K,64K,1M,16M, 2 repeats, 1 warm-up, 16 storages of "
                     "at most 8M per repeat) that the simulated CUDA runtime runs in seconds; "
                     "options given explicitly still apply");
  *help = !args.parse(argc, argv);
  Settings s;
  if (*help) {
    return s;
  }
  s.out = args.get("out");
  if (s.out.empty()) {
    throw UsageError("--out is required");
  }
  s.sizes = parse_size_list(args.get_or_short("sizes", "4K,64K,1M,16M"));
  for (size_t size : s.sizes) {
    if (size < 4 * kKiB || size > kGiB || size % sizeof(uint32_t) != 0) {
      throw UsageError("--sizes: " + format_size(size) +
                       " is outside 4 KiB..1 GiB or not a multiple of 4 bytes");
    }
  }
  s.repeats =
      static_cast<int>(parse_int(args.get_or_short("repeats", "2"), 1, 10000, "repeats"));
  s.warmup = static_cast<int>(parse_int(args.get_or_short("warmup", "1"), 0, 1000, "warmup"));
  s.target_bytes = parse_size(args.get_or_short("target-bytes", "8M"));
  s.max_count = static_cast<size_t>(
      parse_int(args.get_or_short("max-count", "16"), 1, 65536, "max-count"));
  s.device = static_cast<int>(parse_int(args.get("device"), 0, 63, "device"));
  return s;
}

StoragePtr make_storage(size_t nbytes) {
  return c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), c10::SymInt(static_cast<int64_t>(nbytes)),
      Caching::get(), /*resizable=*/false);
}

uint32_t seed_for(size_t index) {
  return static_cast<uint32_t>(index) + 1;
}

// Counts pattern mismatches of every buffer on `stream`, then waits for them.
unsigned long long check_buffers(const std::vector<const void*>& buffers, size_t size,
                                 unsigned long long* counter, cudaStream_t stream) {
  LMS_BENCH_CUDA(cudaMemsetAsync(counter, 0, sizeof(*counter), stream));
  for (size_t i = 0; i < buffers.size(); ++i) {
    LMS_BENCH_CUDA(count_mismatches(static_cast<const uint32_t*>(buffers[i]),
                                    size / sizeof(uint32_t), seed_for(i), counter, stream));
  }
  unsigned long long found = 0;
  LMS_BENCH_CUDA(
      cudaMemcpyAsync(&found, counter, sizeof(found), cudaMemcpyDeviceToHost, stream));
  LMS_BENCH_CUDA(cudaStreamSynchronize(stream));
  return found;
}

SizeResult measure(const Settings& s, size_t size, unsigned long long* counter) {
  SizeResult result;
  result.size = size;
  result.count = std::clamp<size_t>(s.target_bytes / size, 1, s.max_count);
  const size_t count = result.count;
  const c10::DeviceIndex device = static_cast<c10::DeviceIndex>(s.device);
  cudaStream_t compute = c10::cuda::getCurrentCUDAStream(device).stream();
  cudaStream_t out_stream = lms::page_out_stream(device);

  // Raw buffers: plain cudaMalloc and cudaHostAlloc, copied on their own stream.
  cudaStream_t raw_stream = nullptr;
  LMS_BENCH_CUDA(cudaStreamCreateWithFlags(&raw_stream, cudaStreamNonBlocking));
  std::vector<void*> raw_device(count, nullptr);
  std::vector<void*> raw_host(count, nullptr);
  for (size_t i = 0; i < count; ++i) {
    LMS_BENCH_CUDA(cudaMalloc(&raw_device[i], size));
    LMS_BENCH_CUDA(cudaHostAlloc(&raw_host[i], size, cudaHostAllocDefault));
    LMS_BENCH_CUDA(fill_pattern(static_cast<uint32_t*>(raw_device[i]), size / sizeof(uint32_t),
                                seed_for(i), raw_stream));
  }

  // LMS storages: filled, then made inactive so that reclaim_inactive() takes them.
  std::vector<StoragePtr> storages;
  for (size_t i = 0; i < count; ++i) {
    storages.push_back(make_storage(size));
    if (storages.back()->lms() == nullptr) {
      throw CheckFailed("a storage is not managed by LMS: is LMS enabled in this build?");
    }
    storages.back()->lms()->pin();
    LMS_BENCH_CUDA(fill_pattern(static_cast<uint32_t*>(writable_data(*storages.back())),
                                size / sizeof(uint32_t), seed_for(i), compute));
    storages.back()->lms()->unpin();
  }
  LMS_BENCH_CUDA(cudaDeviceSynchronize());

  EventPair raw_out_time, raw_in_time, lms_out_time, lms_in_time;
  for (int rep = -s.warmup; rep < s.repeats; ++rep) {
    raw_out_time.start(raw_stream);
    for (size_t i = 0; i < count; ++i) {
      LMS_BENCH_CUDA(cudaMemcpyAsync(raw_host[i], raw_device[i], size, cudaMemcpyDeviceToHost,
                                     raw_stream));
    }
    raw_out_time.stop(raw_stream);
    // Poison the device copies so that only the copy back can make them right.
    for (size_t i = 0; i < count; ++i) {
      LMS_BENCH_CUDA(cudaMemsetAsync(raw_device[i], 0xa5, size, raw_stream));
    }
    raw_in_time.start(raw_stream);
    for (size_t i = 0; i < count; ++i) {
      LMS_BENCH_CUDA(cudaMemcpyAsync(raw_device[i], raw_host[i], size, cudaMemcpyHostToDevice,
                                     raw_stream));
    }
    raw_in_time.stop(raw_stream);
    double raw_out_ms = raw_out_time.elapsed_ms();
    double raw_in_ms = raw_in_time.elapsed_ms();
    std::vector<const void*> raw_views(raw_device.begin(), raw_device.end());
    unsigned long long raw_bad = check_buffers(raw_views, size, counter, raw_stream);

    LMS_BENCH_CUDA(cudaDeviceSynchronize());
    lms_out_time.start(out_stream);
    size_t paged_out = lms::reclaim_inactive(device);
    lms_out_time.stop(out_stream);
    if (paged_out != count) {
      throw CheckFailed("reclaim_inactive() paged out " + std::to_string(paged_out) + " of " +
                        std::to_string(count) + " storages of " + format_size(size));
    }
    for (const StoragePtr& storage : storages) {
      if (storage->lms()->state() != c10::lms::State::kReclaimed) {
        throw CheckFailed("a storage is not reclaimed after reclaim_inactive()");
      }
    }
    lms_in_time.start(compute);
    for (const StoragePtr& storage : storages) {
      storage->lms()->pin();
    }
    lms_in_time.stop(compute);
    double lms_out_ms = lms_out_time.elapsed_ms();
    double lms_in_ms = lms_in_time.elapsed_ms();
    std::vector<const void*> lms_views;
    for (const StoragePtr& storage : storages) {
      lms_views.push_back(storage->data());
    }
    unsigned long long lms_bad = check_buffers(lms_views, size, counter, compute);
    for (const StoragePtr& storage : storages) {
      // A mutable access, as a training step's next write would make: without it the next
      // page-out finds the host copy current and copies nothing (clean reclaim), which is not
      // what this benchmark measures.
      static_cast<void>(writable_data(*storage));
      storage->lms()->unpin();
    }

    result.mismatches += raw_bad + lms_bad;
    if (rep >= 0) {
      result.raw_d2h.push_back(raw_out_ms);
      result.raw_h2d.push_back(raw_in_ms);
      result.lms_out.push_back(lms_out_ms);
      result.lms_in.push_back(lms_in_ms);
    }
  }

  storages.clear();
  for (size_t i = 0; i < count; ++i) {
    LMS_BENCH_CUDA(cudaFree(raw_device[i]));
    LMS_BENCH_CUDA(cudaFreeHost(raw_host[i]));
  }
  LMS_BENCH_CUDA(cudaStreamDestroy(raw_stream));
  Caching::emptyCache();
  return result;
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
  lms::set_enabled(true);
  lms::set_limit(0);
  lms::set_host_limit(0);

  unsigned long long* counter = nullptr;
  LMS_BENCH_CUDA(cudaMalloc(reinterpret_cast<void**>(&counter), sizeof(*counter)));

  Json json;
  json.begin_object();
  json.field("benchmark", "copy-engine");
  json.field("schema", 1);
  json.field("simulated", kSimulatedRuntime);
  write_device_info(json, s.device);
  write_timing(json, simulated_calibration());
  json.begin_object("settings");
  json.field("repeats", s.repeats);
  json.field("warmup", s.warmup);
  json.field("target_bytes", s.target_bytes);
  json.field("max_count", s.max_count);
  json.end_object();
  json.begin_object("goal");
  json.field("min_size", kGoalMinSize);
  json.field("ratio", kGoalRatio);
  json.end_object();
  json.begin_array("results");

  unsigned long long mismatches = 0;
  std::printf("%10s %6s %10s %10s %10s %10s %7s %7s\n", "size", "count", "raw d2h", "lms out",
              "raw h2d", "lms in", "out", "in");
  for (size_t size : s.sizes) {
    SizeResult r = measure(s, size, counter);
    size_t bytes = r.size * r.count;
    Summary raw_d2h = summarize(r.raw_d2h), raw_h2d = summarize(r.raw_h2d);
    Summary lms_out = summarize(r.lms_out), lms_in = summarize(r.lms_in);
    double ratio_out = raw_d2h.median_ms / lms_out.median_ms;
    double ratio_in = raw_h2d.median_ms / lms_in.median_ms;
    json.begin_object();
    json.field("size", r.size);
    json.field("count", r.count);
    json.field("bytes_per_repeat", bytes);
    json.summary("raw_d2h", raw_d2h, bytes, r.raw_d2h);
    json.summary("raw_h2d", raw_h2d, bytes, r.raw_h2d);
    json.summary("lms_out", lms_out, bytes, r.lms_out);
    json.summary("lms_in", lms_in, bytes, r.lms_in);
    json.field("ratio_out", ratio_out);
    json.field("ratio_in", ratio_in);
    json.field("mismatches", r.mismatches);
    json.field("data_ok", r.mismatches == 0);
    json.end_object();
    mismatches += r.mismatches;
    auto gbps = [bytes](const Summary& x) { return bytes / (x.median_ms * 1e6); };
    std::printf("%10s %6zu %8.2fGB %8.2fGB %8.2fGB %8.2fGB %7.3f %7.3f%s\n",
                format_size(size).c_str(), r.count, gbps(raw_d2h), gbps(lms_out), gbps(raw_h2d),
                gbps(lms_in), ratio_out, ratio_in, r.mismatches ? "  DATA MISMATCH" : "");
    std::fflush(stdout);
  }
  json.end_array();
  json.field("data_ok", mismatches == 0);
  json.end_object();
  json.write(s.out);
  LMS_BENCH_CUDA(cudaFree(counter));
  lms::set_enabled(false);
  if (mismatches != 0) {
    throw CheckFailed(std::to_string(mismatches) + " words differed after a round trip");
  }
  std::printf("wrote %s\n", s.out.c_str());
  return kExitOk;
}

} // namespace

int main(int argc, char** argv) {
  return lms_bench::run_program(kProgram, [&] { return run(argc, argv); });
}
