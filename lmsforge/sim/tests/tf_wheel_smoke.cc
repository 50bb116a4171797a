// Smoke test of the driver front end through the tensorflow==2.14.1 wheel:
// StreamExecutor's real CUDA platform (in libtensorflow_framework.so.2, which
// dlopens libcuda.so.1) running on the simulator. For devices 0 and 1: two
// streams; stream `a` fills a device buffer with a 32-bit pattern and copies
// a page-locked host buffer over its first half; stream `b` waits for `a`
// (ThenWaitFor: an event), copies the whole buffer back and runs a host
// callback that checks the bytes in stream order. Under LMS_SIM_SEED a
// missing wait shows up as wrong bytes. Prints one line per device and exits
// 0 only if every byte and the callback are right.
//
// Built with g++ against the wheel's headers (test_cuda_sim_driver.py):
// the seam TensorFlow's core-sim level (issue 26, item 3) will use.

#include "tensorflow/compiler/xla/stream_executor/multi_platform_manager.h"
#include "tensorflow/compiler/xla/stream_executor/platform.h"
#include "tensorflow/compiler/xla/stream_executor/stream.h"
#include "tensorflow/compiler/xla/stream_executor/stream_executor_pimpl.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace se = stream_executor;

namespace {

constexpr uint32_t kFill = 0x5a5a5a5au;
constexpr uint64_t kWords = 1u << 20;  // 4 MiB: large copies move in seeded random blocks

uint32_t word(int device, uint64_t i) {
  return static_cast<uint32_t>(i * 2654435761u) ^ static_cast<uint32_t>(device + 1);
}

// The first half comes from the host, the second keeps the memset pattern.
uint64_t wrong_words(const uint32_t* back, int device) {
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < kWords; ++i) {
    uint32_t expected = i < kWords / 2 ? word(device, i) : kFill;
    wrong += back[i] != expected ? 1 : 0;
  }
  return wrong;
}

bool run_device(se::Platform* platform, int device) {
  auto executor_or = platform->ExecutorForDevice(device);
  if (!executor_or.ok()) {
    std::printf("device %d: no executor: %s\n", device,
                executor_or.status().ToString().c_str());
    return false;
  }
  se::StreamExecutor* executor = executor_or.value();
  se::Stream a(executor);
  se::Stream b(executor);
  a.Init();
  b.Init();
  const uint64_t bytes = kWords * sizeof(uint32_t);
  se::DeviceMemory<uint32_t> buffer = executor->AllocateArray<uint32_t>(kWords);
  auto* source = static_cast<uint32_t*>(executor->HostMemoryAllocate(bytes));
  auto* back = static_cast<uint32_t*>(executor->HostMemoryAllocate(bytes));
  if (buffer.is_null() || source == nullptr || back == nullptr) {
    std::printf("device %d: allocation failed\n", device);
    return false;
  }
  for (uint64_t i = 0; i < kWords; ++i) {
    source[i] = word(device, i);
  }
  std::memset(back, 0, bytes);

  std::atomic<int> callbacks{0};
  std::atomic<uint64_t> wrong_in_callback{~0ull};
  a.ThenMemset32(&buffer, kFill, bytes);
  a.ThenMemcpy(&buffer, source, bytes / 2);
  b.ThenWaitFor(&a);
  b.ThenMemcpy(back, buffer, bytes);
  b.ThenDoHostCallback([&] {
    wrong_in_callback = wrong_words(back, device);
    callbacks.fetch_add(1);
  });
  tsl::Status synced = b.BlockHostUntilDone();
  uint64_t wrong = wrong_words(back, device);
  bool ok = a.ok() && b.ok() && synced.ok() && callbacks.load() == 1 && wrong == 0 &&
      wrong_in_callback.load() == 0;
  std::printf("device %d: streams ok=%d/%d sync=%s callbacks=%d wrong_words=%llu "
              "wrong_in_callback=%llu of %llu -> %s\n",
              device, a.ok() ? 1 : 0, b.ok() ? 1 : 0, synced.ToString().c_str(),
              callbacks.load(), static_cast<unsigned long long>(wrong),
              static_cast<unsigned long long>(wrong_in_callback.load()),
              static_cast<unsigned long long>(kWords), ok ? "OK" : "FAILED");
  executor->HostMemoryDeallocate(source);
  executor->HostMemoryDeallocate(back);
  executor->Deallocate(&buffer);
  return ok;
}

}  // namespace

int main() {
  auto platform_or = se::MultiPlatformManager::PlatformWithName("CUDA");
  if (!platform_or.ok()) {
    std::printf("no CUDA platform: %s\n", platform_or.status().ToString().c_str());
    return 1;
  }
  se::Platform* platform = platform_or.value();
  std::printf("visible devices: %d\n", platform->VisibleDeviceCount());
  if (platform->VisibleDeviceCount() < 2) {
    return 1;
  }
  bool ok = run_device(platform, 0);
  ok = run_device(platform, 1) && ok;
  std::printf("%s\n", ok ? "SMOKE OK" : "SMOKE FAILED");
  return ok ? 0 : 1;
}
