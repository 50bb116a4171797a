// Unit tests of the simulated CUDA runtime, through the CUDA runtime API only
// (the simulator's internals are not used). pytest (tests/integration/
// test_cuda_sim.py) runs this program twice: plainly, and with LMS_SIM_SEED
// set, which the adversarial tests need (they skip, saying so, without it).

#include <gtest/gtest.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr size_t kMiB = size_t(1) << 20;

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr
#define EXPECT_CUDA(expr) EXPECT_EQ((expr), cudaSuccess) << #expr

bool seeded() {
  const char* seed = std::getenv("LMS_SIM_SEED");
  return seed != nullptr && *seed != '\0' && std::string(seed) != "0";
}

// A host function that blocks its stream until the test opens it.
class Gate {
 public:
  Gate() : opened_(promise_.get_future().share()) {}
  ~Gate() { open(); }
  void enqueue(cudaStream_t stream) {
    ASSERT_CUDA(cudaLaunchHostFunc(stream, &Gate::wait, this));
  }
  void open() {
    if (!open_.exchange(true)) {
      promise_.set_value();
    }
  }

 private:
  static void wait(void* self) { static_cast<Gate*>(self)->opened_.wait(); }
  std::promise<void> promise_;
  std::shared_future<void> opened_;
  std::atomic<bool> open_{false};
};

void sleep_ms(void* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(ms)));
}

void* as_arg(intptr_t ms) {
  return reinterpret_cast<void*>(ms);
}

uint8_t read_byte(const void* device, size_t offset = 0) {
  uint8_t value = 0;
  EXPECT_CUDA(cudaMemcpy(&value, static_cast<const uint8_t*>(device) + offset, 1,
                         cudaMemcpyDeviceToHost));
  return value;
}

std::vector<uint8_t> read_all(const void* device, size_t bytes) {
  std::vector<uint8_t> host(bytes);
  EXPECT_CUDA(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost));
  return host;
}

// A PTX module with the entry the series' CUDA test file launches; the
// simulator matches it by name and parameter list and runs its host version.
constexpr const char* kSlowSumPtx = R"(
.version 7.0
.target sm_75
.address_size 64
.visible .entry lms_test_slow_sum(
  .param .u64 src, .param .u64 words, .param .u64 spin_ns, .param .u64 sum)
{
  ret;
}
)";

template <typename Fn>
Fn driver(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  EXPECT_CUDA(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found));
  EXPECT_EQ(found, cudaDriverEntryPointSuccess) << name;
  return reinterpret_cast<Fn>(fn);
}

struct SlowSum {
  SlowSum() {
    EXPECT_CUDA(cudaFree(nullptr));
    auto load = driver<decltype(&cuModuleLoadData)>("cuModuleLoadData");
    auto get = driver<decltype(&cuModuleGetFunction)>("cuModuleGetFunction");
    launch_ = driver<decltype(&cuLaunchKernel)>("cuLaunchKernel");
    EXPECT_EQ(load(&module, kSlowSumPtx), CUDA_SUCCESS);
    EXPECT_EQ(get(&function, module, "lms_test_slow_sum"), CUDA_SUCCESS);
  }
  CUresult launch(const void* src, size_t bytes, uint64_t spin_ns, void* sum,
                  cudaStream_t stream) {
    unsigned long long words = bytes / 4;
    unsigned long long spin = spin_ns;
    void* args[] = {&src, &words, &spin, &sum};
    return launch_(function, 4, 1, 1, 64, 1, 1, 0, reinterpret_cast<CUstream>(stream), args,
                   nullptr);
  }
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  decltype(&cuLaunchKernel) launch_ = nullptr;
};

class Sim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CUDA(cudaSetDevice(0));
    (void)cudaGetLastError();
  }
  void* device_buffer(size_t bytes) {
    void* p = nullptr;
    EXPECT_CUDA(cudaMalloc(&p, bytes));
    buffers_.push_back(p);
    return p;
  }
  cudaStream_t stream(unsigned flags = cudaStreamNonBlocking) {
    cudaStream_t s = nullptr;
    EXPECT_CUDA(cudaStreamCreateWithFlags(&s, flags));
    streams_.push_back(s);
    return s;
  }
  void TearDown() override {
    EXPECT_CUDA(cudaDeviceSynchronize());
    for (cudaStream_t s : streams_) {
      EXPECT_CUDA(cudaStreamDestroy(s));
    }
    for (void* p : buffers_) {
      EXPECT_CUDA(cudaFree(p));
    }
  }
  std::vector<void*> buffers_;
  std::vector<cudaStream_t> streams_;
};

// ---- devices, memory, errors ------------------------------------------------

TEST_F(Sim, DeviceCountFollowsTheEnvironment) {
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  const char* configured = std::getenv("LMS_SIM_DEVICES");
  EXPECT_EQ(count, configured ? std::atoi(configured) : 2);
}

TEST_F(Sim, InvalidDeviceOrdinalIsAnError) {
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  EXPECT_EQ(cudaSetDevice(count), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // taken
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);
  cudaDeviceProp prop{};
  EXPECT_EQ(cudaGetDeviceProperties(&prop, count), cudaErrorInvalidDevice);
  int device = -1;
  ASSERT_CUDA(cudaGetDevice(&device));
  EXPECT_EQ(device, 0);  // unchanged by the failed calls
  (void)cudaGetLastError();
}

TEST_F(Sim, OutOfMemoryBeyondTheCapacity) {
  size_t free_before = 0, total = 0;
  ASSERT_CUDA(cudaMemGetInfo(&free_before, &total));
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, total + 1), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  void* q = device_buffer(3 * kMiB);
  ASSERT_NE(q, nullptr);
  size_t free_after = 0;
  ASSERT_CUDA(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_before - free_after, 4 * kMiB);  // 2 MiB granules
}

TEST_F(Sim, FreshDeviceMemoryIsPoisoned) {
  void* p = device_buffer(kMiB);
  std::vector<uint8_t> bytes = read_all(p, kMiB);
  // Not zero, not one repeated byte: no memset value matches it.
  EXPECT_NE(bytes[0], bytes[1]);
  size_t zeros = 0;
  for (uint8_t b : bytes) {
    zeros += b == 0;
  }
  EXPECT_EQ(zeros, 0u);
}

TEST_F(Sim, FreedDeviceMemoryIsGoneAndNotHandedOutAgainAtOnce) {
  void* p = nullptr;
  ASSERT_CUDA(cudaMalloc(&p, kMiB));
  ASSERT_CUDA(cudaMemset(p, 3, kMiB));
  ASSERT_CUDA(cudaFree(p));
  uint8_t byte = 0;
  EXPECT_EQ(cudaMemcpy(&byte, p, 1, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // a double free
  void* q = device_buffer(kMiB);
  EXPECT_NE(q, p);
  EXPECT_NE(read_byte(q), 3);
  (void)cudaGetLastError();
}

TEST_F(Sim, PointerAttributesTellDeviceHostAndUnregisteredApart) {
  ASSERT_CUDA(cudaSetDevice(1));
  void* on_one = device_buffer(kMiB);
  ASSERT_CUDA(cudaSetDevice(0));
  void* pinned = nullptr;
  ASSERT_CUDA(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault));
  int stack = 0;
  cudaPointerAttributes a{};
  ASSERT_CUDA(cudaPointerGetAttributes(&a, static_cast<char*>(on_one) + 100));
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 1);
  ASSERT_CUDA(cudaPointerGetAttributes(&a, pinned));
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  EXPECT_EQ(a.hostPointer, pinned);
  ASSERT_CUDA(cudaPointerGetAttributes(&a, &stack));
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  ASSERT_CUDA(cudaFreeHost(pinned));
}

TEST_F(Sim, HostPointerPassedAsDevicePointerIsAnError) {
  std::vector<uint8_t> host(4096);
  void* device = device_buffer(4096);
  EXPECT_EQ(cudaMemcpy(host.data(), host.data() + 1, 16, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), device, 16, cudaMemcpyHostToDevice),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(host.data(), 0, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(host.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(host.data(), device, 8192, cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);  // beyond the allocation, though within its granule
  (void)cudaGetLastError();
}

// Handles that never were one are refused with an error code; handles
// destroyed earlier end the process (SimDeathTest below).
TEST_F(Sim, InvalidHandlesAreRefused) {
  cudaStream_t s = nullptr;
  int garbage = 0;
  EXPECT_EQ(cudaStreamQuery(reinterpret_cast<cudaStream_t>(&garbage)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(reinterpret_cast<cudaStream_t>(&garbage)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(reinterpret_cast<cudaEvent_t>(&garbage)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(reinterpret_cast<cudaEvent_t>(&garbage), nullptr),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, 0x80), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_F(Sim, EventOfOneDeviceCannotBeRecordedOnAnotherDevicesStream) {
  cudaEvent_t on_zero = nullptr;
  ASSERT_CUDA(cudaEventCreateWithFlags(&on_zero, cudaEventDisableTiming));
  ASSERT_CUDA(cudaSetDevice(1));
  cudaStream_t on_one = stream();
  EXPECT_EQ(cudaEventRecord(on_zero, on_one), cudaErrorInvalidResourceHandle);
  // Waiting across devices is allowed.
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaEventRecord(on_zero, nullptr));
  EXPECT_CUDA(cudaStreamWaitEvent(on_one, on_zero, 0));
  ASSERT_CUDA(cudaEventDestroy(on_zero));
  (void)cudaGetLastError();
}

TEST_F(Sim, StreamPrioritiesAreAcceptedAndClamped) {
  int least = 1, greatest = 1;
  ASSERT_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_LT(greatest, 0);
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest - 10));
  int priority = 0;
  ASSERT_CUDA(cudaStreamGetPriority(s, &priority));
  EXPECT_EQ(priority, greatest);
  ASSERT_CUDA(cudaStreamDestroy(s));
}

// ---- ordering -----------------------------------------------------------------

TEST_F(Sim, WorkOnOneStreamRunsInOrder) {
  cudaStream_t s = stream();
  constexpr int kSteps = 64;
  void* chain[kSteps + 1];
  for (void*& p : chain) {
    p = device_buffer(kMiB);
  }
  ASSERT_CUDA(cudaMemsetAsync(chain[0], 0x42, kMiB, s));
  for (int i = 0; i < kSteps; ++i) {
    ASSERT_CUDA(cudaMemcpyAsync(chain[i + 1], chain[i], kMiB, cudaMemcpyDeviceToDevice, s));
  }
  ASSERT_CUDA(cudaStreamSynchronize(s));
  std::vector<uint8_t> last = read_all(chain[kSteps], kMiB);
  EXPECT_EQ(last, std::vector<uint8_t>(kMiB, 0x42));
}

TEST_F(Sim, SeededDelaysReorderWorkAcrossStreams) {
  if (!seeded()) {
    GTEST_SKIP() << "needs LMS_SIM_SEED";
  }
  cudaStream_t first = stream(), second = stream();
  int first_won = 0, second_won = 0;
  for (int trial = 0; trial < 200; ++trial) {
    void* p = device_buffer(4096);
    // No ordering between the streams: either memset may land last.
    ASSERT_CUDA(cudaMemsetAsync(p, 1, 4096, first));
    ASSERT_CUDA(cudaMemsetAsync(p, 2, 4096, second));
    ASSERT_CUDA(cudaDeviceSynchronize());
    (read_byte(p) == 2 ? first_won : second_won) += 1;
  }
  EXPECT_GT(first_won, 0);
  EXPECT_GT(second_won, 0) << "work queued later on another stream never overtook";
}

TEST_F(Sim, AnEventOrdersWorkAcrossStreams) {
  cudaStream_t first = stream(), second = stream();
  cudaEvent_t done = nullptr;
  ASSERT_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  for (int trial = 0; trial < 50; ++trial) {
    void* p = device_buffer(4096);
    ASSERT_CUDA(cudaLaunchHostFunc(first, sleep_ms, as_arg(trial % 3)));
    ASSERT_CUDA(cudaMemsetAsync(p, 1, 4096, first));
    ASSERT_CUDA(cudaEventRecord(done, first));
    ASSERT_CUDA(cudaStreamWaitEvent(second, done, 0));
    ASSERT_CUDA(cudaMemsetAsync(p, 2, 4096, second));
    ASSERT_CUDA(cudaStreamSynchronize(second));
    EXPECT_EQ(read_byte(p), 2) << "trial " << trial;
  }
  ASSERT_CUDA(cudaEventDestroy(done));
}

TEST_F(Sim, EventQueryAndTheRecordAWaitSees) {
  cudaStream_t first = stream(), second = stream(), idle = stream();
  cudaEvent_t event = nullptr;
  ASSERT_CUDA(cudaEventCreate(&event));
  EXPECT_CUDA(cudaEventQuery(event));  // never recorded: complete
  Gate gate;
  gate.enqueue(first);
  ASSERT_CUDA(cudaEventRecord(event, first));
  EXPECT_EQ(cudaEventQuery(event), cudaErrorNotReady);
  ASSERT_CUDA(cudaStreamWaitEvent(second, event, 0));
  // Recording again does not change what `second` already waits for.
  ASSERT_CUDA(cudaEventRecord(event, idle));
  ASSERT_CUDA(cudaStreamSynchronize(idle));
  EXPECT_CUDA(cudaEventQuery(event));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(second), cudaErrorNotReady);
  gate.open();
  ASSERT_CUDA(cudaStreamSynchronize(second));
  ASSERT_CUDA(cudaEventDestroy(event));
  (void)cudaGetLastError();
}

TEST_F(Sim, ElapsedTimeBetweenEvents) {
  cudaStream_t s = stream();
  SlowSum kernel;
  void* sum = device_buffer(8);
  cudaEvent_t start = nullptr, end = nullptr, untimed = nullptr;
  ASSERT_CUDA(cudaEventCreate(&start));
  ASSERT_CUDA(cudaEventCreate(&end));
  ASSERT_CUDA(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorInvalidResourceHandle);
  Gate gate;
  ASSERT_CUDA(cudaEventRecord(start, s));
  ASSERT_EQ(kernel.launch(nullptr, 0, 30ull * 1000 * 1000, sum, s), CUDA_SUCCESS);
  gate.enqueue(s);
  ASSERT_CUDA(cudaEventRecord(end, s));
  ASSERT_CUDA(cudaEventRecord(untimed, s));
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  gate.open();
  ASSERT_CUDA(cudaEventSynchronize(end));
  ASSERT_CUDA(cudaEventElapsedTime(&ms, start, end));
  // Virtual time: the kernel's 30 ms spin and its launch; the gate, a host
  // function, takes none however long it held the stream.
  EXPECT_GE(ms, 30.0f);
  EXPECT_LT(ms, 30.1f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  for (cudaEvent_t e : {start, end, untimed}) {
    ASSERT_CUDA(cudaEventDestroy(e));
  }
  (void)cudaGetLastError();
}

TEST_F(Sim, LegacyStreamWaitsForBlockingStreamsAndTheyForIt) {
  cudaStream_t blocking = stream(cudaStreamDefault);
  void* p = device_buffer(4096);
  Gate gate;
  gate.enqueue(blocking);
  ASSERT_CUDA(cudaMemsetAsync(p, 1, 4096, blocking));
  ASSERT_CUDA(cudaMemsetAsync(p, 2, 4096, nullptr));  // legacy: after the blocking stream
  ASSERT_CUDA(cudaMemsetAsync(p, 3, 4096, blocking));  // after the legacy memset
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
  gate.open();
  ASSERT_CUDA(cudaStreamSynchronize(blocking));
  EXPECT_EQ(read_byte(p), 3);
  ASSERT_CUDA(cudaMemsetAsync(p, 4, 4096, nullptr));
  ASSERT_CUDA(cudaMemsetAsync(p, 5, 4096, blocking));
  ASSERT_CUDA(cudaStreamSynchronize(blocking));
  EXPECT_EQ(read_byte(p), 5);
  (void)cudaGetLastError();
}

TEST_F(Sim, NonBlockingStreamsDoNotSynchroniseWithTheLegacyStream) {
  cudaStream_t non_blocking = stream(cudaStreamNonBlocking);
  void* p = device_buffer(4096);
  Gate gate;
  gate.enqueue(non_blocking);
  ASSERT_CUDA(cudaMemsetAsync(p, 1, 4096, nullptr));
  // Returns although the non-blocking stream is stuck.
  ASSERT_CUDA(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(read_byte(p), 1);
  EXPECT_EQ(cudaStreamQuery(non_blocking), cudaErrorNotReady);
  gate.open();
  ASSERT_CUDA(cudaStreamSynchronize(non_blocking));
  (void)cudaGetLastError();
}

TEST_F(Sim, PerThreadDefaultStreamSynchronisesWithTheLegacyStream) {
  void* p = device_buffer(4096);
  Gate gate;
  gate.enqueue(cudaStreamPerThread);
  ASSERT_CUDA(cudaMemsetAsync(p, 1, 4096, cudaStreamPerThread));
  ASSERT_CUDA(cudaMemsetAsync(p, 2, 4096, cudaStreamLegacy));
  gate.open();
  ASSERT_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
  EXPECT_EQ(read_byte(p), 2);
}

TEST_F(Sim, MemsetIsAsynchronousAndPageableCopiesFollowTheDocumentedRules) {
  void* p = device_buffer(4096);
  Gate gate;
  gate.enqueue(nullptr);
  // cudaMemset to device memory returns before it runs.
  ASSERT_CUDA(cudaMemset(p, 7, 4096));
  // A copy from pageable memory is staged at the call.
  std::vector<uint8_t> source(4096, 9);
  cudaStream_t s = stream(cudaStreamDefault);
  ASSERT_CUDA(cudaMemcpyAsync(p, source.data(), 4096, cudaMemcpyHostToDevice, s));
  std::fill(source.begin(), source.end(), 1);
  gate.open();
  // A copy to pageable memory returns when it is done.
  std::vector<uint8_t> back(4096, 0);
  ASSERT_CUDA(cudaMemcpyAsync(back.data(), p, 4096, cudaMemcpyDeviceToHost, s));
  EXPECT_EQ(back, std::vector<uint8_t>(4096, 9));
}

TEST_F(Sim, HostFunctionsRunInStreamOrderAndMayNotCallCuda) {
  cudaStream_t s = stream();
  struct Probe {
    std::atomic<int> calls{0};
    cudaError_t inside = cudaSuccess;
  } probe;
  auto call_cuda = [](void* arg) {
    auto* self = static_cast<Probe*>(arg);
    int count = 0;
    self->inside = cudaGetDeviceCount(&count);
    self->calls++;
  };
  ASSERT_CUDA(cudaLaunchHostFunc(s, sleep_ms, as_arg(10)));
  ASSERT_CUDA(cudaLaunchHostFunc(s, call_cuda, &probe));
  EXPECT_EQ(probe.calls.load(), 0);
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_EQ(probe.calls.load(), 1);
  EXPECT_EQ(probe.inside, cudaErrorNotPermitted);
}

// ---- kernels through the driver API ----------------------------------------------

TEST_F(Sim, PtxKernelRunsItsHostImplementationOnTheStream) {
  SlowSum kernel;
  cudaStream_t s = stream();
  std::vector<uint32_t> words(1024);
  uint64_t expected = 0;
  for (uint32_t i = 0; i < words.size(); ++i) {
    words[i] = i * 2654435761u;
    expected += words[i];
  }
  void* src = device_buffer(words.size() * 4);
  void* sum = device_buffer(8);
  ASSERT_CUDA(cudaMemcpy(src, words.data(), words.size() * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemset(sum, 0, 8));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_EQ(kernel.launch(src, words.size() * 4, 100ull * 1000 * 1000, sum, s), CUDA_SUCCESS);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);  // still "spinning"
  ASSERT_CUDA(cudaStreamSynchronize(s));
  uint64_t got = 0;
  ASSERT_CUDA(cudaMemcpy(&got, sum, 8, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, expected);
  // A launch on a stream of another device fails.
  ASSERT_CUDA(cudaSetDevice(1));
  cudaStream_t other = stream();
  ASSERT_CUDA(cudaSetDevice(0));
  EXPECT_EQ(kernel.launch(src, 4, 0, sum, other), CUDA_ERROR_INVALID_HANDLE);
  (void)cudaGetLastError();
}

TEST_F(Sim, UnknownPtxEntryAndDriverSymbolAreRefusedByName) {
  auto load = driver<decltype(&cuModuleLoadData)>("cuModuleLoadData");
  CUmodule module = nullptr;
  EXPECT_EQ(load(&module, ".visible .entry not_simulated_kernel(.param .u64 a)\n{ ret; }"),
            CUDA_ERROR_NOT_SUPPORTED);
  void* fn = reinterpret_cast<void*>(1);
  cudaDriverEntryPointQueryResult found{};
  ASSERT_CUDA(cudaGetDriverEntryPoint("cuMemMap", &fn, cudaEnableDefault, &found));
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(found, cudaDriverEntryPointSymbolNotFound);
}

// ---- stream capture -------------------------------------------------------------

TEST_F(Sim, CapturedWorkIsRecordedNotRunAndReplaysOnLaunch) {
  cudaStream_t s = stream();
  void* p = device_buffer(4096);
  ASSERT_CUDA(cudaMemset(p, 1, 4096));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status{};
  ASSERT_CUDA(cudaStreamIsCapturing(s, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_CUDA(cudaMemsetAsync(p, 7, 4096, s));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  ASSERT_CUDA(cudaStreamIsCapturing(s, &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(read_byte(p), 1);
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  ASSERT_CUDA(cudaGraphLaunch(exec, s));
  ASSERT_CUDA(cudaStreamSynchronize(s));
  EXPECT_EQ(read_byte(p), 7);
  ASSERT_CUDA(cudaGraphExecDestroy(exec));
  ASSERT_CUDA(cudaGraphDestroy(graph));
}

TEST_F(Sim, SynchronisingACapturingStreamInvalidatesTheCapture) {
  cudaStream_t s = stream();
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorStreamCaptureUnsupported);
  cudaStreamCaptureStatus status{};
  unsigned long long id = 0;
  ASSERT_CUDA(cudaStreamGetCaptureInfo(s, &status, &id, nullptr, nullptr, nullptr, nullptr));
  EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
  EXPECT_NE(id, 0u);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  (void)cudaGetLastError();
}

TEST_F(Sim, CapturedEventCannotBeQueried) {
  cudaStream_t s = stream();
  cudaEvent_t event = nullptr;
  ASSERT_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  ASSERT_CUDA(cudaEventRecord(event, s));
  EXPECT_EQ(cudaEventQuery(event), cudaErrorCapturedEvent);
  EXPECT_EQ(cudaEventSynchronize(event), cudaErrorCapturedEvent);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  ASSERT_CUDA(cudaGraphDestroy(graph));
  ASSERT_CUDA(cudaEventDestroy(event));
  (void)cudaGetLastError();
}

TEST_F(Sim, ForkedCaptureMustBeJoined) {
  cudaStream_t origin = stream(), side = stream();
  void* p = device_buffer(4096);
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_CUDA(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  ASSERT_CUDA(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  for (bool joined : {false, true}) {
    ASSERT_CUDA(cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal));
    ASSERT_CUDA(cudaEventRecord(fork, origin));
    ASSERT_CUDA(cudaStreamWaitEvent(side, fork, 0));
    cudaStreamCaptureStatus status{};
    ASSERT_CUDA(cudaStreamIsCapturing(side, &status));
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);  // the side stream joined
    ASSERT_CUDA(cudaMemsetAsync(p, 5, 4096, side));
    if (joined) {
      ASSERT_CUDA(cudaEventRecord(join, side));
      ASSERT_CUDA(cudaStreamWaitEvent(origin, join, 0));
    }
    cudaGraph_t graph = nullptr;
    cudaError_t ended = cudaStreamEndCapture(origin, &graph);
    if (joined) {
      EXPECT_CUDA(ended);
      ASSERT_CUDA(cudaGraphDestroy(graph));
    } else {
      EXPECT_EQ(ended, cudaErrorStreamCaptureUnjoined);
    }
    ASSERT_CUDA(cudaStreamIsCapturing(side, &status));
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  }
  EXPECT_NE(read_byte(p), 5);  // captured, never run
  ASSERT_CUDA(cudaEventDestroy(fork));
  ASSERT_CUDA(cudaEventDestroy(join));
  (void)cudaGetLastError();
}

TEST_F(Sim, LegacyStreamBesideACapturingBlockingStreamIsAnError) {
  cudaStream_t blocking = stream(cudaStreamDefault);
  void* p = device_buffer(4096);
  ASSERT_CUDA(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed));
  EXPECT_EQ(cudaMemsetAsync(p, 1, 4096, nullptr), cudaErrorStreamCaptureImplicit);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(blocking, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  (void)cudaGetLastError();
}

TEST_F(Sim, UnsafeCallsDuringCaptureFollowTheThreadsMode) {
  cudaStream_t s = stream();
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 4096), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);

  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  ASSERT_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);
  EXPECT_CUDA(cudaMalloc(&p, 4096));
  ASSERT_CUDA(cudaThreadExchangeStreamCaptureMode(&mode));
  // Another thread in global mode is prohibited too.
  cudaError_t from_other_thread = cudaSuccess;
  std::thread([&] {
    cudaEvent_t e = nullptr;
    from_other_thread = cudaEventCreate(&e);
    if (from_other_thread == cudaSuccess) {
      from_other_thread = cudaEventQuery(e);
    }
  }).join();
  EXPECT_EQ(from_other_thread, cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
  ASSERT_CUDA(cudaFree(p));
  (void)cudaGetLastError();
}

TEST_F(Sim, AThreadInRelaxedOrThreadLocalModeKeepsAnotherThreadsGlobalCaptureValid) {
  // CUDA: a thread in relaxed mode is never prohibited; one in thread-local
  // mode only by its own captures; so neither invalidates a global-mode
  // capture of another thread (LMS's pinned pool grows on such a thread).
  cudaStream_t s = stream();
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaError_t relaxed = cudaErrorUnknown;
  cudaError_t thread_local_mode = cudaErrorUnknown;
  void* host = nullptr;
  void* device = nullptr;
  std::thread([&] {
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
      return;
    }
    relaxed = cudaHostAlloc(&host, kMiB, cudaHostAllocPortable);
    mode = cudaStreamCaptureModeThreadLocal;
    if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
      return;
    }
    thread_local_mode = cudaMalloc(&device, 4096);
  }).join();
  EXPECT_CUDA(relaxed);
  EXPECT_CUDA(thread_local_mode);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  ASSERT_CUDA(cudaGraphDestroy(graph));
  ASSERT_CUDA(cudaFreeHost(host));
  ASSERT_CUDA(cudaFree(device));
}

TEST_F(Sim, CaptureMustEndOnItsThread) {
  cudaStream_t s = stream();
  ASSERT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaError_t from_other_thread = cudaSuccess;
  std::thread([&] {
    cudaGraph_t graph = nullptr;
    from_other_thread = cudaStreamEndCapture(s, &graph);
  }).join();
  EXPECT_EQ(from_other_thread, cudaErrorStreamCaptureWrongThread);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA(cudaStreamEndCapture(s, &graph));
  ASSERT_CUDA(cudaGraphDestroy(graph));
}

// ---- loud ends: each in a child process -------------------------------------------

// On a GPU a destroyed cudaStream_t or cudaEvent_t is a dangling pointer the
// driver dereferences: undefined behaviour, a crash on the H200 (issue: LMS
// recorded an event on a destroyed external stream). The simulator ends the
// process naming the call and the handle instead of returning an error code
// the program could catch and carry on with.
TEST(SimDeathTest, ADestroyedStreamEndsTheProcessNamingTheCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        cudaStream_t s = nullptr;
        cudaEvent_t e = nullptr;
        if (cudaStreamCreate(&s) != cudaSuccess || cudaEventCreate(&e) != cudaSuccess ||
            cudaStreamDestroy(s) != cudaSuccess) {
          std::exit(2);
        }
        (void)cudaEventRecord(e, s);
      },
      "lms_cuda_sim: cudaEventRecord on stream [0-9]+, destroyed earlier: undefined "
      "behaviour on a GPU \\(a crash there\\)");
  EXPECT_DEATH(
      {
        cudaStream_t s = nullptr;
        cudaEvent_t e = nullptr;
        if (cudaStreamCreate(&s) != cudaSuccess || cudaEventCreate(&e) != cudaSuccess ||
            cudaStreamDestroy(s) != cudaSuccess) {
          std::exit(2);
        }
        (void)cudaStreamWaitEvent(s, e, 0);
      },
      "cudaStreamWaitEvent on stream [0-9]+, destroyed earlier");
  EXPECT_DEATH(
      {
        cudaStream_t s = nullptr;
        if (cudaStreamCreate(&s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess) {
          std::exit(2);
        }
        (void)cudaStreamDestroy(s);
      },
      "cudaStreamDestroy on stream [0-9]+, destroyed earlier");
}

TEST(SimDeathTest, ADestroyedEventEndsTheProcessNamingTheCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        cudaEvent_t e = nullptr;
        if (cudaEventCreate(&e) != cudaSuccess || cudaEventDestroy(e) != cudaSuccess) {
          std::exit(2);
        }
        (void)cudaEventQuery(e);
      },
      "cudaEventQuery on event 0x[0-9a-f]+, destroyed earlier");
}

TEST(SimDeathTest, UnimplementedFunctionAbortsNamingItself) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        void* p = nullptr;
        (void)cudaMallocAsync(&p, 64, nullptr);
      },
      "cudaMallocAsync is not simulated");
}

TEST(SimDeathTest, FaultPoisonsTheContextLikeAnIllegalAddress) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        SlowSum kernel;
        void* sum = nullptr;
        if (cudaMalloc(&sum, 8) != cudaSuccess) {
          std::exit(2);
        }
        std::vector<uint32_t> host(16);  // a host pointer handed to a kernel
        if (kernel.launch(host.data(), 64, 0, sum, nullptr) != CUDA_SUCCESS) {
          std::exit(3);
        }
        bool faulted = cudaDeviceSynchronize() == cudaErrorIllegalAddress &&
            cudaMalloc(&sum, 8) == cudaErrorIllegalAddress &&
            cudaGetLastError() == cudaErrorIllegalAddress;
        std::exit(faulted ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "cudaErrorIllegalAddress on cuda:0 in kernel");
}

TEST(SimDeathTest, PrimaryContextExistsOnlyOnceADeviceIsUsed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto state = driver<decltype(&cuDevicePrimaryCtxGetState)>("cuDevicePrimaryCtxGetState");
        unsigned flags = 0;
        int before = -1;
        int queried = -1;
        int after = -1;
        cudaDeviceProp prop{};
        state(1, &flags, &before);
        (void)cudaGetDeviceProperties(&prop, 1);  // a query creates no context
        state(1, &flags, &queried);
        (void)cudaSetDevice(1);
        state(1, &flags, &after);
        std::exit(before == 0 && queried == 0 && after == 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

} // namespace
