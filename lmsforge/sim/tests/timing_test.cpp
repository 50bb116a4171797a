// Unit tests of the simulator's timing model (timing.h), through the CUDA
// runtime API and the simulator's own header: event times are virtual, and
// follow the calibration table in effect (lmsSimCalibration()), whichever it
// is, so these tests pass with the built-in H100 table and with an override
// file (tests/integration/test_cuda_sim.py runs both).

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <lms_cuda_sim.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace {

constexpr size_t kMiB = size_t(1) << 20;

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define EXPECT_CUDA(expr) EXPECT_EQ((expr), cudaSuccess) << #expr

// A value of the calibration table in effect.
double calibrated(const std::string& key) {
  std::string json = lmsSimCalibration();
  std::smatch match;
  std::regex value("\"" + key + "\": \\{\"value\": ([0-9.eE+-]+)");
  if (!std::regex_search(json, match, value)) {
    ADD_FAILURE() << key << " is not in " << json;
    return 0;
  }
  return std::stod(match[1].str());
}

// The calibrated cost of `bytes` on a curve of (bytes, us) points: linear
// between points, the first point's cost below them, the last slope above.
double curve_us(const std::string& key, double bytes) {
  std::string json = lmsSimCalibration();
  std::smatch match;
  if (!std::regex_search(json, match, std::regex("\"" + key + "\": \\{\"value\": \\[(.*?)\\]\\]"))) {
    ADD_FAILURE() << key << " is not in " << json;
    return 0;
  }
  std::vector<std::pair<double, double>> points;
  std::string list = match[1].str();
  std::regex point("\\[?([0-9.eE+-]+), ([0-9.eE+-]+)");
  for (auto it = std::sregex_iterator(list.begin(), list.end(), point);
       it != std::sregex_iterator(); ++it) {
    points.emplace_back(std::stod((*it)[1].str()), std::stod((*it)[2].str()));
  }
  if (points.size() == 1 || bytes <= points.front().first) {
    return points.front().second;
  }
  size_t upper = 1;
  while (upper + 1 < points.size() && bytes > points[upper].first) {
    ++upper;
  }
  auto [x0, y0] = points[upper - 1];
  auto [x1, y1] = points[upper];
  return y0 + (y1 - y0) * (bytes - x0) / (x1 - x0);
}

double copy_us(const std::string& direction, size_t bytes) {
  return calibrated(direction + "_latency_us") + bytes / calibrated(direction + "_gbps") / 1e3;
}

// A kernel with no data effect that takes `ns` on the simulated device.
cudaError_t timed_kernel(cudaStream_t stream, double ns, double sleep_ms = 0) {
  struct Args {
    double sleep_ms;
  } args{sleep_ms};
  lmsSimKernelWork work{0, 0, ns};
  return lmsSimLaunchHostKernel(
      stream, "timed", [](void* raw) {
        double ms = static_cast<Args*>(raw)->sleep_ms;
        std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(ms * 1000)));
        return cudaSuccess;
      },
      &args, sizeof(args), &work);
}

class Timing : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CUDA(cudaSetDevice(0));
    ASSERT_CUDA(cudaDeviceSynchronize());
  }
  void TearDown() override {
    EXPECT_CUDA(cudaDeviceSynchronize());
    for (cudaEvent_t e : events_) {
      EXPECT_CUDA(cudaEventDestroy(e));
    }
    for (cudaStream_t s : streams_) {
      EXPECT_CUDA(cudaStreamDestroy(s));
    }
    for (void* p : device_) {
      EXPECT_CUDA(cudaFree(p));
    }
    for (void* p : pinned_) {
      EXPECT_CUDA(cudaFreeHost(p));
    }
  }
  cudaStream_t stream() {
    cudaStream_t s = nullptr;
    EXPECT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    streams_.push_back(s);
    return s;
  }
  cudaEvent_t event() {
    cudaEvent_t e = nullptr;
    EXPECT_CUDA(cudaEventCreate(&e));
    events_.push_back(e);
    return e;
  }
  void* device(size_t bytes) {
    void* p = nullptr;
    EXPECT_CUDA(cudaMalloc(&p, bytes));
    device_.push_back(p);
    return p;
  }
  void* pinned(size_t bytes) {
    void* p = nullptr;
    EXPECT_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    pinned_.push_back(p);
    return p;
  }
  // Milliseconds between two events once the second is done.
  float elapsed(cudaEvent_t from, cudaEvent_t to) {
    EXPECT_CUDA(cudaEventSynchronize(to));
    float ms = -1;
    EXPECT_CUDA(cudaEventElapsedTime(&ms, from, to));
    return ms;
  }

  std::vector<cudaEvent_t> events_;
  std::vector<cudaStream_t> streams_;
  std::vector<void*> device_, pinned_;
};

TEST_F(Timing, CalibrationInEffectIsReported) {
  std::string json = lmsSimCalibration();
  std::printf("calibration: %s\n", json.c_str());
  EXPECT_NE(json.find("\"name\": "), std::string::npos);
  EXPECT_GT(calibrated("d2h_gbps"), 0);
  EXPECT_NE(json.find("\"device_alloc_free_us\""), std::string::npos);
}

TEST_F(Timing, ACopyTakesItsLatencyPlusItsBytesAtTheLinkRate) {
  cudaStream_t s = stream();
  cudaEvent_t start = event(), stop = event();
  for (size_t bytes : {4096ul, kMiB, 64 * kMiB}) {
    for (bool to_host : {true, false}) {
      void* d = device(bytes);
      void* h = pinned(bytes);
      ASSERT_CUDA(cudaEventRecord(start, s));
      ASSERT_CUDA(cudaMemcpyAsync(to_host ? h : d, to_host ? d : h, bytes,
                                  to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, s));
      ASSERT_CUDA(cudaEventRecord(stop, s));
      // The copy starts once the host has issued it.
      double expected_us = calibrated("memcpy_call_us") + copy_us(to_host ? "d2h" : "h2d", bytes);
      EXPECT_NEAR(elapsed(start, stop) * 1e3, expected_us, expected_us * 1e-4)
          << bytes << (to_host ? " B to the host" : " B to the device");
    }
  }
}

TEST_F(Timing, CopiesOfOneDirectionShareTheLink) {
  const size_t bytes = 16 * kMiB;
  cudaStream_t a = stream(), b = stream();
  void *d1 = device(bytes), *d2 = device(bytes), *h1 = pinned(bytes), *h2 = pinned(bytes);
  cudaEvent_t start = event(), a_done = event(), b_done = event();
  ASSERT_CUDA(cudaEventRecord(start, a));
  ASSERT_CUDA(cudaStreamWaitEvent(b, start, 0));
  ASSERT_CUDA(cudaMemcpyAsync(h1, d1, bytes, cudaMemcpyDeviceToHost, a));
  ASSERT_CUDA(cudaMemcpyAsync(h2, d2, bytes, cudaMemcpyDeviceToHost, b));
  ASSERT_CUDA(cudaEventRecord(a_done, a));
  ASSERT_CUDA(cudaEventRecord(b_done, b));
  float first = elapsed(start, a_done), second = elapsed(start, b_done);
  double one_us = copy_us("d2h", bytes);
  EXPECT_GT(second * 1e3, 2 * one_us);  // one after the other
  EXPECT_LT(first * 1e3, one_us + 10);
}

TEST_F(Timing, TheTwoDirectionsOverlapAtTheDuplexRate) {
  const size_t bytes = 64 * kMiB;
  cudaStream_t out = stream(), in = stream();
  void *d1 = device(bytes), *d2 = device(bytes), *h1 = pinned(bytes), *h2 = pinned(bytes);
  cudaEvent_t start = event(), out_done = event(), in_done = event();
  ASSERT_CUDA(cudaEventRecord(start, out));
  ASSERT_CUDA(cudaStreamWaitEvent(in, start, 0));
  ASSERT_CUDA(cudaMemcpyAsync(h1, d1, bytes, cudaMemcpyDeviceToHost, out));
  ASSERT_CUDA(cudaMemcpyAsync(d2, h2, bytes, cudaMemcpyHostToDevice, in));
  ASSERT_CUDA(cudaEventRecord(out_done, out));
  ASSERT_CUDA(cudaEventRecord(in_done, in));
  double call_us = calibrated("memcpy_call_us");
  double out_end_us = calibrated("stream_wait_event_us") + call_us + copy_us("d2h", bytes);
  EXPECT_NEAR(elapsed(start, out_done) * 1e3, out_end_us, 0.01);
  // The copy issued second moves at the duplex rate while the first one
  // moves, then alone.
  double moving_us = calibrated("stream_wait_event_us") + 2 * call_us +
      calibrated("h2d_latency_us");
  double shared_bytes = (out_end_us - moving_us) * 1e3 *
      std::min(calibrated("duplex_gbps"), calibrated("h2d_gbps"));
  double in_end_us = out_end_us + (bytes - shared_bytes) / calibrated("h2d_gbps") / 1e3;
  EXPECT_NEAR(elapsed(start, in_done) * 1e3, in_end_us, 0.01);
  EXPECT_LT(in_end_us, 0.75 * (copy_us("d2h", bytes) + copy_us("h2d", bytes)));  // overlap
}

TEST_F(Timing, ACopyWaitingForAnEventLetsLaterCopiesPass) {
  const size_t bytes = 16 * kMiB;
  cudaStream_t compute = stream(), late = stream(), early = stream();
  void *d1 = device(bytes), *d2 = device(bytes), *h1 = pinned(bytes), *h2 = pinned(bytes);
  cudaEvent_t start = event(), computed = event(), early_done = event();
  ASSERT_CUDA(cudaEventRecord(start, compute));
  ASSERT_CUDA(timed_kernel(compute, 5e6));
  ASSERT_CUDA(cudaEventRecord(computed, compute));
  ASSERT_CUDA(cudaStreamWaitEvent(late, computed, 0));
  ASSERT_CUDA(cudaMemcpyAsync(h1, d1, bytes, cudaMemcpyDeviceToHost, late));
  ASSERT_CUDA(cudaMemcpyAsync(h2, d2, bytes, cudaMemcpyDeviceToHost, early));
  ASSERT_CUDA(cudaEventRecord(early_done, early));
  // The link is free until the kernel ends: the copy issued later uses it.
  EXPECT_LT(elapsed(start, early_done), 1.0f);
}

TEST_F(Timing, CopiesOverlapCompute) {
  const size_t bytes = 64 * kMiB;
  cudaStream_t compute = stream(), copy = stream();
  void *d = device(bytes), *h = pinned(bytes);
  cudaEvent_t start = event(), kernel_done = event(), copy_done = event();
  ASSERT_CUDA(cudaEventRecord(start, compute));
  ASSERT_CUDA(cudaStreamWaitEvent(copy, start, 0));
  ASSERT_CUDA(timed_kernel(compute, 2e6));
  ASSERT_CUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, copy));
  ASSERT_CUDA(cudaEventRecord(kernel_done, compute));
  ASSERT_CUDA(cudaEventRecord(copy_done, copy));
  // Each call's host time delays what it issues.
  double issued_us = calibrated("stream_wait_event_us") + calibrated("launch_us");
  EXPECT_NEAR(elapsed(start, kernel_done) * 1e3, issued_us + 2000, 0.01);
  double copy_end_us = issued_us + calibrated("memcpy_call_us") + copy_us("d2h", bytes);
  EXPECT_NEAR(elapsed(start, copy_done) * 1e3, copy_end_us, 0.01);
}

TEST_F(Timing, KernelsTakeTheComputeEngineOneAtATime) {
  cudaStream_t a = stream(), b = stream();
  cudaEvent_t start = event(), a_done = event(), b_done = event();
  ASSERT_CUDA(cudaEventRecord(start, a));
  ASSERT_CUDA(cudaStreamWaitEvent(b, start, 0));
  ASSERT_CUDA(timed_kernel(a, 1e6));
  ASSERT_CUDA(timed_kernel(b, 1e6));
  ASSERT_CUDA(cudaEventRecord(a_done, a));
  ASSERT_CUDA(cudaEventRecord(b_done, b));
  double issued_us = calibrated("stream_wait_event_us") + calibrated("launch_us");
  EXPECT_NEAR(elapsed(start, a_done) * 1e3, issued_us + 1000, 0.01);
  EXPECT_NEAR(elapsed(start, b_done) * 1e3, issued_us + 2000, 0.01);
}

TEST_F(Timing, AKernelDeclaresItsWork) {
  cudaStream_t s = stream();
  cudaEvent_t start = event(), stop = event();
  for (auto [bytes, ops, requested] : {std::tuple{3.35e9, 0.0, 0.0}, std::tuple{0.0, 1e9, 0.0},
                                       std::tuple{1e6, 1e3, 5e5}}) {
    lmsSimKernelWork work{bytes, ops, requested};
    ASSERT_CUDA(cudaEventRecord(start, s));
    ASSERT_CUDA(lmsSimLaunchHostKernel(s, "work", [](void*) { return cudaSuccess; }, nullptr, 0,
                                       &work));
    ASSERT_CUDA(cudaEventRecord(stop, s));
    double expected_ns = std::max({bytes / calibrated("hbm_gbps"),
                                   ops / calibrated("alu_gops"), requested});
    EXPECT_NEAR(elapsed(start, stop) * 1e6, expected_ns + calibrated("launch_us") * 1e3,
                expected_ns * 1e-5 + 1);
  }
}

TEST_F(Timing, TheHostPaysForPinnedAllocation) {
  // Host time between two records on an idle stream is what the calls between
  // them cost.
  cudaStream_t s = stream();
  cudaEvent_t start = event(), stop = event();
  ASSERT_CUDA(cudaEventRecord(start, s));
  pinned(32 * kMiB);
  ASSERT_CUDA(cudaEventRecord(stop, s));
  // The table prices cudaHostAlloc and cudaFreeHost together: half each.
  double expected_us = curve_us("pinned_alloc_free_us", 32.0 * kMiB) / 2 +
      calibrated("event_record_us");
  EXPECT_NEAR(elapsed(start, stop) * 1e3, expected_us, expected_us * 1e-5);
}

TEST_F(Timing, PinningOnAnotherThreadHoldsThisThreadsCalls) {
  // On a GPU the driver holds every thread's runtime calls while one thread
  // pins host memory (an H200 step of 30 ms took 629 ms while a pool pinned a
  // chunk on its own thread: bench/reference/h200-2026-11-28). The pin starts
  // when the other thread makes it, at the latest time any thread reached
  // (here this one's, after its record).
  cudaStream_t s = stream();
  cudaEvent_t start = event(), stop = event();
  ASSERT_CUDA(cudaEventRecord(start, s));
  void* p = nullptr;
  std::thread pinning([&] { EXPECT_CUDA(cudaHostAlloc(&p, 64 * kMiB, cudaHostAllocDefault)); });
  pinning.join();
  pinned_.push_back(p);
  ASSERT_CUDA(cudaEventRecord(stop, s));
  double held_us = curve_us("pinned_alloc_free_us", 64.0 * kMiB) / 2;
  double record_us = calibrated("event_record_us");
  EXPECT_NEAR(elapsed(start, stop) * 1e3, held_us + record_us,
              (held_us + record_us) * 1e-5);
}

TEST_F(Timing, QueriesAnswerInVirtualTime) {
  cudaStream_t s = stream();
  cudaEvent_t done = event();
  // Really finished at once, but 50 ms long on the simulated GPU: not ready
  // until the host waits for it.
  ASSERT_CUDA(timed_kernel(s, 50e6));
  ASSERT_CUDA(cudaEventRecord(done, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  (void)cudaGetLastError();
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_CUDA(cudaEventQuery(done));
  // Instant on the simulated GPU, but 30 ms for the host to compute: the
  // query waits for it and says it is done.
  ASSERT_CUDA(timed_kernel(s, 0, 30));
  ASSERT_CUDA(cudaEventRecord(done, s));
  auto before = std::chrono::steady_clock::now();
  EXPECT_CUDA(cudaEventQuery(done));
  EXPECT_GE(std::chrono::steady_clock::now() - before, std::chrono::milliseconds(25));
}

TEST_F(Timing, TheSameWorkTakesTheSameTimeUnderAnySeed) {
  const size_t bytes = 8 * kMiB;
  cudaStream_t compute = stream(), out = stream();
  void *d = device(bytes), *h = pinned(bytes);
  cudaEvent_t start = event(), ready = event(), stop = event();
  std::vector<float> times;
  for (int round = 0; round < 3; ++round) {
    ASSERT_CUDA(cudaEventRecord(start, compute));
    ASSERT_CUDA(timed_kernel(compute, 1e5));
    ASSERT_CUDA(cudaEventRecord(ready, compute));
    ASSERT_CUDA(cudaStreamWaitEvent(out, ready, 0));
    ASSERT_CUDA(cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, out));
    ASSERT_CUDA(cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, compute));
    ASSERT_CUDA(cudaEventRecord(stop, out));
    ASSERT_CUDA(cudaStreamWaitEvent(compute, stop, 0));
    ASSERT_CUDA(cudaEventRecord(stop, compute));
    times.push_back(elapsed(start, stop));
  }
  EXPECT_EQ(times[0], times[1]);
  EXPECT_EQ(times[1], times[2]);
}

TEST_F(Timing, EachDeviceHasItsOwnEngines) {
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  if (count < 2) {
    GTEST_SKIP() << "needs LMS_SIM_DEVICES >= 2";
  }
  const size_t bytes = 16 * kMiB;
  cudaStream_t first = stream();
  void *d0 = device(bytes), *h0 = pinned(bytes), *h1 = pinned(bytes);
  cudaEvent_t start = event(), stop = event();
  ASSERT_CUDA(cudaSetDevice(1));
  cudaStream_t second = nullptr;
  void* d1 = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaMalloc(&d1, bytes));
  ASSERT_CUDA(cudaMemcpyAsync(h1, d1, bytes, cudaMemcpyDeviceToHost, second));
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaEventRecord(start, first));
  ASSERT_CUDA(cudaMemcpyAsync(h0, d0, bytes, cudaMemcpyDeviceToHost, first));
  ASSERT_CUDA(cudaEventRecord(stop, first));
  // Device 1's copy does not delay device 0's.
  EXPECT_NEAR(elapsed(start, stop) * 1e3,
              calibrated("memcpy_call_us") + copy_us("d2h", bytes), 0.01);
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaStreamSynchronize(second));
  ASSERT_CUDA(cudaStreamDestroy(second));
  ASSERT_CUDA(cudaFree(d1));
  ASSERT_CUDA(cudaSetDevice(0));
}

}  // namespace

// LMS_SIM_POLL_CLOCK (test_cuda_sim.py runs this test with it and without):
// a thread that queries unfinished work once and goes on does not wait for
// it, as TensorFlow's EventMgr::ThenExecute polls on its caller's thread; a
// second query in a row is a polling loop, whose clock then catches up with
// the work's end (with the setting only).
TEST_F(Timing, OnlyAPollingLoopCatchesUpWithTheWorkItQueries) {
  const char* setting = std::getenv("LMS_SIM_POLL_CLOCK");
  const bool poll_clock = setting != nullptr && std::string(setting) == "1";
  cudaStream_t busy = stream(), idle = stream();
  cudaEvent_t start = event(), kernel_done = event(), issued = event(), polled = event();
  ASSERT_CUDA(cudaEventRecord(start, idle));
  ASSERT_CUDA(timed_kernel(busy, 5e6));
  ASSERT_CUDA(cudaEventRecord(kernel_done, busy));
  EXPECT_EQ(cudaEventQuery(kernel_done), cudaErrorNotReady);
  ASSERT_CUDA(cudaEventRecord(issued, idle));  // the host's clock, on an idle stream
  EXPECT_LT(elapsed(start, issued), 1.0f) << "one query made the thread wait";
  EXPECT_EQ(cudaEventQuery(kernel_done), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(kernel_done), cudaErrorNotReady);  // polling now
  if (poll_clock) {
    EXPECT_CUDA(cudaEventQuery(kernel_done));
  }
  ASSERT_CUDA(cudaEventRecord(polled, idle));
  if (poll_clock) {
    EXPECT_GE(elapsed(start, polled), 5.0f) << "a polling loop did not catch up";
  } else {
    EXPECT_LT(elapsed(start, polled), 1.0f) << "a query moved the clock";
  }
}
