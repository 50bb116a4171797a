#include "oversubscription_bound.h"

#include "kernels.h"
#include "pattern.h"

#include <algorithm>
#include <cstdio>

namespace lms_bench {

namespace {
constexpr size_t kSamples = 4096;
} // namespace

size_t gradient_mismatches(const std::vector<uint32_t>& grad, int layers, int rounds) {
  size_t mismatches = 0;
  const size_t stride = std::max<size_t>(1, grad.size() / kSamples);
  std::vector<uint32_t> activation(static_cast<size_t>(layers));
  for (size_t index = 0; index < grad.size(); index += stride) {
    uint32_t x = input_word(index);
    for (int layer = 0; layer < layers; ++layer) {
      x = forward_word(x, layer, rounds);
      activation[static_cast<size_t>(layer)] = x;
    }
    uint32_t g = grad_init_word(index);
    for (int layer = layers - 1; layer >= 0; --layer) {
      g = backward_word(g, activation[static_cast<size_t>(layer)], rounds);
    }
    mismatches += grad[index] != g ? 1 : 0;
  }
  return mismatches;
}

Bandwidth measure_copy_bandwidth(size_t bytes) {
  const int copies = 8;
  cudaStream_t stream = nullptr;
  LMS_BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  void* dev = nullptr;
  void* host = nullptr;
  LMS_BENCH_CUDA(cudaMalloc(&dev, bytes));
  LMS_BENCH_CUDA(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
  LMS_BENCH_CUDA(fill_pattern(static_cast<uint32_t*>(dev), bytes / 4, 1, stream));
  std::vector<double> d2h, h2d;
  EventPair timer;
  for (int rep = -2; rep < 10; ++rep) {
    timer.start(stream);
    for (int i = 0; i < copies; ++i) {
      LMS_BENCH_CUDA(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream));
    }
    timer.stop(stream);
    const double out_ms = timer.elapsed_ms();
    timer.start(stream);
    for (int i = 0; i < copies; ++i) {
      LMS_BENCH_CUDA(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream));
    }
    timer.stop(stream);
    const double in_ms = timer.elapsed_ms();
    if (rep >= 0) {
      d2h.push_back(out_ms);
      h2d.push_back(in_ms);
    }
  }
  LMS_BENCH_CUDA(cudaFree(dev));
  LMS_BENCH_CUDA(cudaFreeHost(host));
  LMS_BENCH_CUDA(cudaStreamDestroy(stream));
  const double moved = static_cast<double>(bytes) * copies;
  return {moved / summarize(d2h).median_ms, moved / summarize(h2d).median_ms};
}

Bound bandwidth_bound(const std::optional<OraclePhases>& oracle, int64_t out_bytes,
                      int64_t in_bytes, size_t activation_total, size_t limit,
                      const Bandwidth& bandwidth) {
  const double t_forward = oracle ? oracle->forward_ms : 0.0;
  const double t_backward = oracle ? oracle->backward_ms : 0.0;
  Bound bound{};
  bound.transfer_out_ms = static_cast<double>(out_bytes) / bandwidth.d2h_bytes_per_ms;
  bound.transfer_in_ms = static_cast<double>(in_bytes) / bandwidth.h2d_bytes_per_ms;
  bound.step_ms = std::max(t_forward, bound.transfer_out_ms) +
                  std::max(t_backward, bound.transfer_in_ms);
  bound.simple_step_ms =
      std::max({t_forward + t_backward, bound.transfer_out_ms, bound.transfer_in_ms});
  // The least any scheduler must move: what does not fit under the limit.
  const double min_moved =
      activation_total > limit ? static_cast<double>(activation_total - limit) : 0.0;
  bound.min_traffic_step_ms = std::max(t_forward, min_moved / bandwidth.d2h_bytes_per_ms) +
                              std::max(t_backward, min_moved / bandwidth.h2d_bytes_per_ms);
  bound.uses_oracle_compute = oracle.has_value();
  return bound;
}

OraclePhases oracle_phases(const std::vector<double>& forward_ms,
                           const std::vector<double>& backward_ms) {
  return {summarize(forward_ms).median_ms, summarize(backward_ms).median_ms};
}

void finish_report(Json& json, size_t failures, const std::string& out) {
  json.end_array();
  json.field("data_ok", failures == 0);
  json.end_object();
  json.write(out);
  if (failures != 0) {
    throw CheckFailed(std::to_string(failures) + " configuration(s) computed a wrong gradient");
  }
  std::printf("wrote %s\n", out.c_str());
}

void write_bound(Json& json, const Bound& bound) {
  json.begin_object("bound");
  json.field("step_ms", bound.step_ms);
  json.field("simple_step_ms", bound.simple_step_ms);
  json.field("min_traffic_step_ms", bound.min_traffic_step_ms);
  json.field("transfer_out_ms", bound.transfer_out_ms);
  json.field("transfer_in_ms", bound.transfer_in_ms);
  json.field("uses_oracle_compute", bound.uses_oracle_compute);
  json.end_object();
}

} // namespace lms_bench
