// Tests of the driver API front end (libcuda.so.1, driver/): each modelled
// call's behaviour and error codes, stream order across streams and devices
// under adversarial seeds (LMS_SIM_SEED), poisoned new memory, the
// host-function rule, and the loud end of unmodelled calls. Built against the
// cuda.h the driver implements; run by tests/integration/test_cuda_sim_driver.py.

#include <cuda.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

#define CU_OK(call) ASSERT_EQ(CUDA_SUCCESS, (call))

constexpr size_t kBig = 4u << 20;  // above 256 KiB: seeded copies move in random blocks

bool seeded() {
  const char* seed = std::getenv("LMS_SIM_SEED");
  return seed != nullptr && std::string(seed) != "0";
}

void* host(CUdeviceptr pointer) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(pointer));
}

uint32_t word(uint32_t round, size_t i) {
  return static_cast<uint32_t>(i * 2654435761u) ^ (round * 0x9e3779b9u);
}

// Must run first in the process: nothing is initialised yet.
TEST(DriverBeforeInit, CallsAreRefusedUntilCuInit) {
  int count = -1;
  EXPECT_EQ(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&count));
  CUcontext context = nullptr;
  EXPECT_EQ(CUDA_ERROR_NOT_INITIALIZED, cuCtxGetCurrent(&context));
  int version = 0;
  CU_OK(cuDriverGetVersion(&version));  // allowed before cuInit
  EXPECT_EQ(CUDA_VERSION, version);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuInit(1));
  CU_OK(cuInit(0));
  CU_OK(cuDeviceGetCount(&count));
  EXPECT_GE(count, 2);
}

class Driver : public ::testing::Test {
 protected:
  void SetUp() override {
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&devices_));
    ASSERT_GE(devices_, 2) << "the driver tests need LMS_SIM_DEVICES >= 2";
    CU_OK(cuDevicePrimaryCtxRetain(&ctx0_, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx1_, 1));
    CU_OK(cuCtxSetCurrent(ctx0_));
  }
  void TearDown() override {
    cuCtxSetCurrent(nullptr);
    cuDevicePrimaryCtxRelease(0);
    cuDevicePrimaryCtxRelease(1);
  }
  int devices_ = 0;
  CUcontext ctx0_ = nullptr;
  CUcontext ctx1_ = nullptr;
};

TEST_F(Driver, DevicesAndTheirAttributes) {
  const char* count = std::getenv("LMS_SIM_DEVICES");
  if (count != nullptr) {
    EXPECT_EQ(std::atoi(count), devices_);  // the engine's setting, read once for both APIs
  }
  CUdevice device = -1;
  CU_OK(cuDeviceGet(&device, 1));
  EXPECT_EQ(1, device);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&device, devices_));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuDeviceGet(nullptr, 0));
  char name[256] = {};
  CU_OK(cuDeviceGetName(name, sizeof(name), 0));
  EXPECT_NE(nullptr, std::strstr(name, "(simulated)")) << name;
  int major = 0;
  int minor = -1;
  CU_OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0));
  CU_OK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0));
  EXPECT_EQ(9, major);
  EXPECT_EQ(0, minor);
  int sms = 0;
  CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1));
  EXPECT_EQ(132, sms);
  int clock = 0;
  CU_OK(cuDeviceGetAttribute(&clock, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 0));
  EXPECT_GT(clock, 0);
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE,
            cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, devices_));
  size_t total = 0;
  CU_OK(cuDeviceTotalMem(&total, 0));
  EXPECT_GT(total, 0u);
  char bus[32] = {};
  CU_OK(cuDeviceGetPCIBusId(bus, sizeof(bus), 1));
  EXPECT_STREQ("0000:02:00.0", bus);
  int peer = -1;
  CU_OK(cuDeviceCanAccessPeer(&peer, 0, 1));
  EXPECT_EQ(1, peer);
  CU_OK(cuDeviceCanAccessPeer(&peer, 0, 0));
  EXPECT_EQ(0, peer);
}

TEST_F(Driver, PrimaryContextsAndTheThreadsStack) {
  unsigned flags = 99;
  int active = 0;
  CU_OK(cuDevicePrimaryCtxGetState(1, &flags, &active));
  EXPECT_EQ(1, active);  // retained in SetUp
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxGetState(devices_, &flags, &active));
  CUcontext again = nullptr;
  CU_OK(cuDevicePrimaryCtxRetain(&again, 1));
  EXPECT_EQ(ctx1_, again);  // one primary context per device
  CU_OK(cuDevicePrimaryCtxRelease(1));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxSetFlags(0, 1u << 20));
  CU_OK(cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC));

  // A new thread has no context: calls that need one are refused.
  std::thread([&] {
    CUcontext current = ctx0_;
    CU_OK(cuCtxGetCurrent(&current));
    EXPECT_EQ(nullptr, current);
    CUdeviceptr pointer = 0;
    EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc(&pointer, 64));
    CUstream stream = nullptr;
    EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuStreamCreate(&stream, 0));
    EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent(&current));

    CU_OK(cuCtxPushCurrent(ctx0_));
    CU_OK(cuCtxPushCurrent(ctx1_));
    CUdevice device = -1;
    CU_OK(cuCtxGetDevice(&device));
    EXPECT_EQ(1, device);
    CU_OK(cuCtxPopCurrent(&current));
    EXPECT_EQ(ctx1_, current);
    CU_OK(cuCtxGetDevice(&device));
    EXPECT_EQ(0, device);
    CU_OK(cuCtxSetCurrent(ctx1_));  // replaces the top
    CU_OK(cuCtxGetDevice(&device));
    EXPECT_EQ(1, device);
    CUcontext bogus = reinterpret_cast<CUcontext>(&device);
    EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent(bogus));
    EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(bogus));
    CU_OK(cuCtxPopCurrent(nullptr));
    CU_OK(cuCtxGetCurrent(&current));
    EXPECT_EQ(nullptr, current);
  }).join();
}

TEST_F(Driver, NewMemoryIsPoisonedAndCopiesAndMemsetsRoundTrip) {
  constexpr size_t kBytes = 1u << 20;
  CUdeviceptr a = 0;
  CUdeviceptr b = 0;
  CU_OK(cuMemAlloc(&a, kBytes));
  CU_OK(cuMemAlloc(&b, kBytes));
  std::vector<uint8_t> back(kBytes, 0);
  CU_OK(cuMemcpyDtoH(back.data(), a, kBytes));
  // Poison: neither zeros nor any memset byte.
  size_t uniform_words = 0;
  for (size_t i = 0; i + 4 <= kBytes; i += 4) {
    uniform_words += back[i] == back[i + 1] && back[i] == back[i + 2] && back[i] == back[i + 3];
  }
  EXPECT_EQ(0u, uniform_words);

  std::vector<uint32_t> words(kBytes / 4);
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = word(1, i);
  }
  CU_OK(cuMemcpyHtoD(a, words.data(), kBytes));
  CU_OK(cuMemcpyDtoD(b, a, kBytes));
  std::vector<uint32_t> got(words.size(), 0);
  CU_OK(cuMemcpyDtoH(got.data(), b, kBytes));
  EXPECT_EQ(words, got);

  CU_OK(cuMemsetD32(a, 0x01020304u, kBytes / 4));
  CU_OK(cuCtxSynchronize());  // device memsets are asynchronous
  CU_OK(cuMemcpyDtoH(got.data(), a, kBytes));
  EXPECT_EQ(std::vector<uint32_t>(words.size(), 0x01020304u), got);
  CU_OK(cuMemsetD8(b + 8, 0xab, 16));
  CU_OK(cuCtxSynchronize());
  CU_OK(cuMemcpyDtoH(back.data(), b, 32));
  EXPECT_EQ(0xab, back[8]);
  EXPECT_EQ(0xab, back[23]);
  EXPECT_NE(0xab, back[24]);

  CU_OK(cuMemFree(a));
  CU_OK(cuMemFree(b));
  // Freed memory is gone: a copy from it is refused, freeing it again too.
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(back.data(), a, 16));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFree(a));
}

TEST_F(Driver, AllocationErrorsAndMemoryInfo) {
  size_t free_before = 0;
  size_t total = 0;
  CU_OK(cuMemGetInfo(&free_before, &total));
  EXPECT_LE(free_before, total);
  CUdeviceptr pointer = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&pointer, 0));
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&pointer, total + 1));
  CU_OK(cuMemAlloc(&pointer, 32u << 20));
  size_t free_after = 0;
  CU_OK(cuMemGetInfo(&free_after, &total));
  EXPECT_LE(free_after + (32u << 20), free_before);
  CU_OK(cuMemFree(pointer));
  CU_OK(cuMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_before, free_after);
  std::vector<char> pageable(64);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuMemFree(static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pageable.data()))));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(pageable.data()));
}

TEST_F(Driver, PointerAttributes) {
  CUdeviceptr device_pointer = 0;
  CU_OK(cuCtxSetCurrent(ctx1_));
  CU_OK(cuMemAlloc(&device_pointer, 4096));
  CU_OK(cuCtxSetCurrent(ctx0_));
  void* pinned = nullptr;
  CU_OK(cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_PORTABLE));

  unsigned type = 0;
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, device_pointer + 100));
  EXPECT_EQ(CU_MEMORYTYPE_DEVICE, type);
  int ordinal = -1;
  CU_OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, device_pointer));
  EXPECT_EQ(1, ordinal);
  CUcontext owner = nullptr;
  CU_OK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, device_pointer));
  EXPECT_EQ(ctx1_, owner);
  CUdeviceptr pinned_address = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pinned));
  CU_OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, pinned_address));
  EXPECT_EQ(CU_MEMORYTYPE_HOST, type);
  void* host_pointer = nullptr;
  CU_OK(cuPointerGetAttribute(&host_pointer, CU_POINTER_ATTRIBUTE_HOST_POINTER, pinned_address));
  EXPECT_EQ(pinned, host_pointer);
  int pageable = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE,
            cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  static_cast<CUdeviceptr>(
                                      reinterpret_cast<uintptr_t>(&pageable))));
  CU_OK(cuMemFreeHost(pinned));
  CU_OK(cuMemFree(device_pointer));
}

TEST_F(Driver, StreamAndEventErrors) {
  CUstream stream = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuStreamCreate(&stream, 4));
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUevent event = nullptr;
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuEventCreate(&event, CU_EVENT_INTERPROCESS));
  CU_OK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventQuery(event));  // never recorded: complete
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuStreamWaitEvent(stream, event, 1));
  CU_OK(cuEventRecord(event, stream));
  CU_OK(cuStreamWaitEvent(nullptr, event, 0));
  float ms = 0;
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, event, event));
  // An event of device 0 cannot be recorded on a stream of device 1.
  CU_OK(cuCtxSetCurrent(ctx1_));
  CUstream other = nullptr;
  CU_OK(cuStreamCreate(&other, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_HANDLE, cuEventRecord(event, other));
  CU_OK(cuStreamWaitEvent(other, event, 0));  // waiting across devices works
  CU_OK(cuStreamSynchronize(other));
  CU_OK(cuStreamDestroy(other));
  CU_OK(cuCtxSetCurrent(ctx0_));
  CU_OK(cuStreamDestroy(stream));
  CU_OK(cuEventDestroy(event));
  // A destroyed handle is no error code but the end of the process
  // (DriverUnmodelled.ADestroyedStreamOrEventEndsTheProcess).
  int least = 1;
  int greatest = 1;
  CU_OK(cuCtxGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(0, least);
  EXPECT_EQ(-5, greatest);
}

TEST_F(Driver, EventsMeasureVirtualTime) {
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, 0));
  CUevent start = nullptr;
  CUevent end = nullptr;
  CU_OK(cuEventCreate(&start, 0));
  CU_OK(cuEventCreate(&end, 0));
  void* source = nullptr;
  CU_OK(cuMemHostAlloc(&source, kBig, 0));
  CUdeviceptr target = 0;
  CU_OK(cuMemAlloc(&target, kBig));
  CU_OK(cuEventRecord(start, stream));
  CU_OK(cuMemcpyHtoDAsync(target, source, kBig, stream));
  CU_OK(cuEventRecord(end, stream));
  CU_OK(cuEventSynchronize(end));
  CU_OK(cuEventQuery(end));
  float ms = 0;
  CU_OK(cuEventElapsedTime(&ms, start, end));
  // 4 MiB host to device on the calibrated H100 link: about 80 us, whatever this host does.
  EXPECT_GT(ms, 0.05f);
  EXPECT_LT(ms, 0.2f);
  CU_OK(cuMemFree(target));
  CU_OK(cuMemFreeHost(source));
  CU_OK(cuEventDestroy(start));
  CU_OK(cuEventDestroy(end));
  CU_OK(cuStreamDestroy(stream));
}

// A writer stream and a reader stream ordered only by an event: under a seed
// the reader's copy would overtake the writer's (and the writer's destination
// is poisoned until its copy completes), so a lost wait shows as wrong words.
TEST_F(Driver, StreamWaitEventOrdersStreamsUnderSeeds) {
  CUstream writer = nullptr;
  CUstream reader = nullptr;
  CU_OK(cuStreamCreate(&writer, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamCreate(&reader, CU_STREAM_NON_BLOCKING));
  CUevent written = nullptr;
  CU_OK(cuEventCreate(&written, CU_EVENT_DISABLE_TIMING));
  uint32_t* source = nullptr;
  uint32_t* back = nullptr;
  CU_OK(cuMemHostAlloc(reinterpret_cast<void**>(&source), kBig, 0));
  CU_OK(cuMemHostAlloc(reinterpret_cast<void**>(&back), kBig, 0));
  CUdeviceptr buffer = 0;
  CU_OK(cuMemAlloc(&buffer, kBig));
  const size_t words = kBig / 4;
  size_t wrong = 0;
  for (uint32_t round = 0; round < 6; ++round) {
    for (size_t i = 0; i < words; ++i) {
      source[i] = word(round, i);
    }
    CU_OK(cuMemsetD32Async(buffer, 0xdeadbeefu, words, writer));
    CU_OK(cuMemcpyHtoDAsync(buffer, source, kBig, writer));
    CU_OK(cuEventRecord(written, writer));
    CU_OK(cuStreamWaitEvent(reader, written, 0));
    CU_OK(cuMemcpyDtoHAsync(back, buffer, kBig, reader));
    CU_OK(cuStreamSynchronize(reader));
    for (size_t i = 0; i < words; ++i) {
      wrong += back[i] != word(round, i) ? 1 : 0;
    }
    CU_OK(cuStreamSynchronize(writer));  // before the next round rewrites `source`
  }
  EXPECT_EQ(0u, wrong) << (seeded() ? "under a seed" : "without a seed");
  CU_OK(cuStreamQuery(reader));
  CU_OK(cuMemFree(buffer));
  CU_OK(cuMemFreeHost(source));
  CU_OK(cuMemFreeHost(back));
  CU_OK(cuEventDestroy(written));
  CU_OK(cuStreamDestroy(writer));
  CU_OK(cuStreamDestroy(reader));
}

// Device 0 writes, device 1's stream waits for device 0's event and copies
// peer to peer, then back to the host.
TEST_F(Driver, TwoDevicesPeerCopyAfterACrossDeviceWait) {
  CUstream s0 = nullptr;
  CU_OK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
  CUevent ready = nullptr;
  CU_OK(cuEventCreate(&ready, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr on0 = 0;
  CU_OK(cuMemAlloc(&on0, kBig));
  uint32_t* source = nullptr;
  CU_OK(cuMemHostAlloc(reinterpret_cast<void**>(&source), kBig, CU_MEMHOSTALLOC_PORTABLE));
  uint32_t* back = nullptr;
  CU_OK(cuMemHostAlloc(reinterpret_cast<void**>(&back), kBig, CU_MEMHOSTALLOC_PORTABLE));
  const size_t words = kBig / 4;
  for (size_t i = 0; i < words; ++i) {
    source[i] = word(7, i);
  }
  CUresult peer = cuCtxEnablePeerAccess(ctx1_, 0);
  EXPECT_TRUE(peer == CUDA_SUCCESS || peer == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) << peer;
  EXPECT_EQ(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, cuCtxEnablePeerAccess(ctx1_, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_DEVICE, cuCtxEnablePeerAccess(ctx0_, 0));
  CU_OK(cuMemcpyHtoDAsync(on0, source, kBig, s0));
  CU_OK(cuEventRecord(ready, s0));

  CU_OK(cuCtxSetCurrent(ctx1_));
  CUstream s1 = nullptr;
  CU_OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
  CUdeviceptr on1 = 0;
  CU_OK(cuMemAlloc(&on1, kBig));
  CU_OK(cuStreamWaitEvent(s1, ready, 0));
  CU_OK(cuMemcpyPeerAsync(on1, ctx1_, on0, ctx0_, kBig, s1));
  CU_OK(cuMemcpyDtoHAsync(back, on1, kBig, s1));
  CU_OK(cuStreamSynchronize(s1));
  size_t wrong = 0;
  for (size_t i = 0; i < words; ++i) {
    wrong += back[i] != word(7, i) ? 1 : 0;
  }
  EXPECT_EQ(0u, wrong);
  EXPECT_EQ(CUDA_ERROR_INVALID_CONTEXT,
            cuMemcpyPeerAsync(on1, nullptr, on0, ctx0_, 16, s1));
  CU_OK(cuMemFree(on1));
  CU_OK(cuStreamDestroy(s1));
  CU_OK(cuCtxSetCurrent(ctx0_));
  CU_OK(cuMemFree(on0));
  CU_OK(cuMemFreeHost(source));
  CU_OK(cuMemFreeHost(back));
  CU_OK(cuEventDestroy(ready));
  CU_OK(cuStreamDestroy(s0));
}

struct HostFunctionSeen {
  const uint32_t* back = nullptr;
  size_t words = 0;
  size_t wrong = ~size_t{0};
  CUstream stream = nullptr;
  std::vector<CUresult> results;
  std::atomic<int> runs{0};
};

void CUDA_CB inspect(void* data) {
  auto* seen = static_cast<HostFunctionSeen*>(data);
  size_t wrong = 0;
  for (size_t i = 0; i < seen->words; ++i) {
    wrong += seen->back[i] != word(3, i) ? 1 : 0;
  }
  seen->wrong = wrong;
  // Every driver call is refused inside a host function (CUDA forbids them;
  // TensorFlow review finding 6 frees page-locked memory in one).
  CUdeviceptr pointer = 0;
  seen->results.push_back(cuMemAlloc(&pointer, 64));
  seen->results.push_back(cuMemFreeHost(const_cast<uint32_t*>(seen->back)));
  seen->results.push_back(cuStreamQuery(seen->stream));
  seen->results.push_back(cuCtxSynchronize());
  seen->results.push_back(cuLaunchHostFunc(seen->stream, inspect, data));
  CUcontext context = nullptr;
  seen->results.push_back(cuCtxGetCurrent(&context));
  seen->results.push_back(cuInit(0));
  seen->runs.fetch_add(1);
}

TEST_F(Driver, HostFunctionRunsInStreamOrderAndDriverCallsInsideAreNotPermitted) {
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  uint32_t* source = nullptr;
  uint32_t* back = nullptr;
  CU_OK(cuMemHostAlloc(reinterpret_cast<void**>(&source), kBig, 0));
  CU_OK(cuMemHostAlloc(reinterpret_cast<void**>(&back), kBig, 0));
  CUdeviceptr buffer = 0;
  CU_OK(cuMemAlloc(&buffer, kBig));
  const size_t words = kBig / 4;
  for (size_t i = 0; i < words; ++i) {
    source[i] = word(3, i);
  }
  HostFunctionSeen seen;
  seen.back = back;
  seen.words = words;
  seen.stream = stream;
  CU_OK(cuMemcpyHtoDAsync(buffer, source, kBig, stream));
  CU_OK(cuMemcpyDtoHAsync(back, buffer, kBig, stream));
  CU_OK(cuLaunchHostFunc(stream, inspect, &seen));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuLaunchHostFunc(stream, nullptr, nullptr));
  CU_OK(cuStreamSynchronize(stream));
  EXPECT_EQ(1, seen.runs.load());
  EXPECT_EQ(0u, seen.wrong);  // ran after both copies, on the stream's worker
  ASSERT_EQ(7u, seen.results.size());
  for (CUresult result : seen.results) {
    EXPECT_EQ(CUDA_ERROR_NOT_PERMITTED, result);
  }
  CU_OK(cuMemFree(buffer));
  CU_OK(cuMemFreeHost(source));
  CU_OK(cuMemFreeHost(back));
  CU_OK(cuStreamDestroy(stream));
}

TEST_F(Driver, ErrorNamesAndStrings) {
  const char* text = nullptr;
  CU_OK(cuGetErrorName(CUDA_ERROR_NOT_PERMITTED, &text));
  EXPECT_STREQ("CUDA_ERROR_NOT_PERMITTED", text);
  CU_OK(cuGetErrorString(CUDA_ERROR_INVALID_CONTEXT, &text));
  EXPECT_STREQ("invalid device context", text);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuGetErrorName(static_cast<CUresult>(12345), &text));
  EXPECT_EQ(nullptr, text);
}

// The virtual memory API as PyTorch's expandable segments use it: addresses
// reserved for free, physical memory charged from creation until it is both
// released and unmapped, bytes reachable only where mapped and accessible (a
// range may span adjacent mappings), new mappings poisoned, unmapped ranges
// gone.
CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

void set_access(CUdeviceptr pointer, size_t bytes, int device) {
  CUmemAccessDesc desc = {};
  desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  desc.location.id = device;
  desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_OK(cuMemSetAccess(pointer, bytes, &desc, 1));
}

TEST_F(Driver, VirtualMemoryMapsPhysicalMemoryIntoReservedAddresses) {
  constexpr size_t kPage = 2u << 20;
  CUmemAllocationProp prop = device_prop(0);
  size_t granularity = 0;
  CU_OK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  EXPECT_EQ(kPage, granularity);

  size_t free_before = 0;
  size_t total = 0;
  CU_OK(cuMemGetInfo(&free_before, &total));
  CUdeviceptr base = 0;
  CU_OK(cuMemAddressReserve(&base, 2 * total, 0, 0, 0));  // addresses cost no memory
  size_t free_now = 0;
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before, free_now);

  CUmemGenericAllocationHandle first = 0;
  CUmemGenericAllocationHandle second = 0;
  CU_OK(cuMemCreate(&first, kPage, &prop, 0));
  CU_OK(cuMemCreate(&second, kPage, &prop, 0));
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before - 2 * kPage, free_now);
  CUmemGenericAllocationHandle too_much = 0;
  EXPECT_EQ(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&too_much, total, &prop, 0));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&too_much, kPage + 1, &prop, 0));

  // Mapped without access, the bytes are not reachable.
  CU_OK(cuMemMap(base, kPage, 0, first, 0));
  std::vector<uint32_t> got(2 * kPage / 4, 0);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(got.data(), base, 64));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemMap(base, kPage, 0, second, 0));  // taken
  CU_OK(cuMemMap(base + kPage, kPage, 0, second, 0));
  set_access(base, 2 * kPage, 0);

  // New physical memory is poisoned; one copy spans both mappings.
  CU_OK(cuMemcpyDtoH(got.data(), base, 2 * kPage));
  size_t zeros = 0;
  for (uint32_t w : got) {
    zeros += w == 0;
  }
  EXPECT_EQ(0u, zeros);
  std::vector<uint32_t> words(got.size());
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = word(7, i);
  }
  CU_OK(cuMemcpyHtoD(base, words.data(), 2 * kPage));
  std::fill(got.begin(), got.end(), 0);
  CU_OK(cuMemcpyDtoH(got.data(), base, 2 * kPage));
  EXPECT_EQ(words, got);
  // Past the last mapping: a fault, not bytes.
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(got.data(), base + kPage, kPage + 4));

  // Released while mapped: still charged until it is unmapped.
  CU_OK(cuMemRelease(second));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemRelease(second));
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before - 2 * kPage, free_now);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemUnmap(base, kPage + 4096));  // not whole mappings
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(base, 2 * total));  // still mapped
  CU_OK(cuMemUnmap(base + kPage, kPage));
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before - kPage, free_now);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(got.data(), base + kPage, 64));
  CU_OK(cuMemcpyDtoH(got.data(), base, 64));  // the other mapping keeps its bytes
  EXPECT_EQ(words[0], got[0]);

  CU_OK(cuMemUnmap(base, kPage));
  CU_OK(cuMemRelease(first));
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before, free_now);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(base, total));  // not the reservation
  CU_OK(cuMemAddressFree(base, 2 * total));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemAddressFree(base, 2 * total));
}

// The bytes belong to the physical memory, as on a GPU: a handle mapped at two
// addresses shows the same bytes at both (the CUDA programming guide's virtual
// aliasing), keeps them while unmapped, and is charged once until it is both
// released and unmapped everywhere.
TEST_F(Driver, AHandleMappedAtTwoAddressesHoldsOneSetOfBytes) {
  constexpr size_t kPage = 2u << 20;
  CUmemAllocationProp prop = device_prop(0);
  size_t free_before = 0;
  size_t total = 0;
  CU_OK(cuMemGetInfo(&free_before, &total));
  CUdeviceptr base = 0;
  CU_OK(cuMemAddressReserve(&base, 4 * kPage, 0, 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  CU_OK(cuMemCreate(&handle, kPage, &prop, 0));
  CU_OK(cuMemMap(base, kPage, 0, handle, 0));
  set_access(base, kPage, 0);
  std::vector<uint32_t> words(kPage / 4);
  for (size_t i = 0; i < words.size(); ++i) {
    words[i] = word(11, i);
  }
  CU_OK(cuMemcpyHtoD(base, words.data(), kPage));

  // A second address for the same memory: the bytes written through the
  // first, and a write through the second seen through the first.
  CUdeviceptr alias = base + 2 * kPage;
  CU_OK(cuMemMap(alias, kPage, 0, handle, 0));
  set_access(alias, kPage, 0);
  std::vector<uint32_t> got(words.size(), 0);
  CU_OK(cuMemcpyDtoH(got.data(), alias, kPage));
  EXPECT_EQ(words, got);
  CU_OK(cuMemsetD32(alias + 64, 0x5a5a5a5au, 4));
  CU_OK(cuMemcpyDtoH(got.data(), base, kPage));
  EXPECT_EQ(0x5a5a5a5au, got[16]);
  EXPECT_EQ(words[15], got[15]);
  EXPECT_EQ(words[20], got[20]);
  size_t free_now = 0;
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before - kPage, free_now);  // one page, however many addresses

  // Unmapped at the first address: that address faults, the other keeps the
  // bytes; released while still mapped there, the memory stays charged.
  CU_OK(cuMemUnmap(base, kPage));
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(got.data(), base, 64));
  CU_OK(cuMemRelease(handle));
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before - kPage, free_now);
  std::fill(got.begin(), got.end(), 0);
  CU_OK(cuMemcpyDtoH(got.data(), alias, kPage));
  EXPECT_EQ(0x5a5a5a5au, got[16]);
  EXPECT_EQ(words[kPage / 4 - 1], got[kPage / 4 - 1]);
  CU_OK(cuMemUnmap(alias, kPage));
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before, free_now);
  EXPECT_EQ(CUDA_ERROR_INVALID_VALUE, cuMemMap(base, kPage, 0, handle, 0));  // gone

  // Unmapped everywhere but not released: mapped again, its bytes are back,
  // not fresh poison.
  CU_OK(cuMemCreate(&handle, kPage, &prop, 0));
  CU_OK(cuMemMap(base + kPage, kPage, 0, handle, 0));
  set_access(base + kPage, kPage, 0);
  CU_OK(cuMemcpyHtoD(base + kPage, words.data(), kPage));
  // A copy from pageable memory returns once its source is staged; an unmap
  // does not wait for the copy (the simulator's seeded delays hold it back).
  CU_OK(cuCtxSynchronize());
  CU_OK(cuMemUnmap(base + kPage, kPage));
  CU_OK(cuMemMap(base + 3 * kPage, kPage, 0, handle, 0));
  set_access(base + 3 * kPage, kPage, 0);
  std::fill(got.begin(), got.end(), 0);
  CU_OK(cuMemcpyDtoH(got.data(), base + 3 * kPage, kPage));
  EXPECT_EQ(words, got);
  CU_OK(cuMemUnmap(base + 3 * kPage, kPage));
  CU_OK(cuMemRelease(handle));
  CU_OK(cuMemGetInfo(&free_now, &total));
  EXPECT_EQ(free_before, free_now);
  CU_OK(cuMemAddressFree(base, 4 * kPage));
}

// Not named *DeathTest: gtest would run it first, before DriverBeforeInit.
using DriverUnmodelled = Driver;

TEST_F(DriverUnmodelled, UnmodelledCallsAbortNamingThemselves) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CUmodule module = nullptr;
  EXPECT_DEATH(cuModuleLoad(&module, "kernels.cubin"),
               "lms_cuda_sim: cuModuleLoad is not simulated");
  CUdeviceptr pointer = 0;
  EXPECT_DEATH(cuMemAllocManaged(&pointer, 64, CU_MEM_ATTACH_GLOBAL),
               "lms_cuda_sim: cuMemAllocManaged is not simulated");
  int managed = 0;
  CU_OK(cuMemAlloc(&pointer, 64));
  EXPECT_DEATH(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, pointer),
               "cuPointerGetAttribute is not simulated: attribute 8");
  CU_OK(cuMemFree(pointer));
  // Virtual memory beyond what PyTorch asks of it.
  CUmemAllocationProp prop = device_prop(0);
  CUdeviceptr base = 0;
  CU_OK(cuMemAddressReserve(&base, 4u << 20, 0, 0, 0));
  CUmemGenericAllocationHandle handle = 0;
  CU_OK(cuMemCreate(&handle, 2u << 20, &prop, 0));
  EXPECT_DEATH(cuMemMap(base, 2u << 20, 4096, handle, 0),
               "cuMemMap is not simulated: a mapping of part of a handle");
  CU_OK(cuMemMap(base, 2u << 20, 0, handle, 0));
  CUmemAccessDesc peer = {};
  peer.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  peer.location.id = 1;
  peer.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  EXPECT_DEATH(cuMemSetAccess(base, 2u << 20, &peer, 1),
               "cuMemSetAccess is not simulated: access for a peer device");
  CU_OK(cuMemUnmap(base, 2u << 20));
  CU_OK(cuMemRelease(handle));
  CU_OK(cuMemAddressFree(base, 4u << 20));
}

// The runtime's rule through the driver (one engine): a handle destroyed
// earlier is a dangling pointer on a GPU, so the process ends, naming the
// runtime call the driver's call is answered by, and the handle.
TEST_F(DriverUnmodelled, ADestroyedStreamOrEventEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  CUstream stream = nullptr;
  CU_OK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CU_OK(cuStreamDestroy(stream));
  EXPECT_DEATH(cuStreamQuery(stream),
               "lms_cuda_sim: cudaStreamQuery on stream [0-9]+, destroyed earlier: undefined "
               "behaviour on a GPU");
  CUevent event = nullptr;
  CU_OK(cuEventCreate(&event, CU_EVENT_DISABLE_TIMING));
  CU_OK(cuEventDestroy(event));
  EXPECT_DEATH(cuEventQuery(event), "cudaEventQuery on event 0x[0-9a-f]+, destroyed earlier");
}

}  // namespace
