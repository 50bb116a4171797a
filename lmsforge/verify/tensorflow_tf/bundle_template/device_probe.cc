// Which CUDA devices this host has, asked of the driver (libcuda.so.1) alone: the TensorFlow
// bundle carries no CUDA toolkit. Prints the driver version and one line per device to stdout;
// exits 0 when there is a device the bundled CUDA 11.8 runtime can use, and 4 otherwise, with
// the reason ("no CUDA device (...)") as the first line, which run-gpu.sh reports.
#include <dlfcn.h>

#include <cstdio>

namespace {

constexpr int kNoDevice = 4;
constexpr int kRuntimeNeeds = 11080;  // CUDA 11.8, the bundled libcudart.so.11.0
constexpr int kComputeCapabilityMajor = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kComputeCapabilityMinor = 76;

using InitFn = int (*)(unsigned);
using IntFn = int (*)(int*);
using NameFn = int (*)(char*, int, int);
using MemFn = int (*)(size_t*, int);
using AttributeFn = int (*)(int*, int, int);

template <typename Fn>
Fn Find(void* driver, const char* name) {
  return reinterpret_cast<Fn>(dlsym(driver, name));
}

}  // namespace

int main() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) {
    std::printf("no CUDA device (libcuda.so.1 not found: no NVIDIA driver here)\n");
    return kNoDevice;
  }
  auto init = Find<InitFn>(driver, "cuInit");
  auto driver_version = Find<IntFn>(driver, "cuDriverGetVersion");
  auto device_count = Find<IntFn>(driver, "cuDeviceGetCount");
  auto device_name = Find<NameFn>(driver, "cuDeviceGetName");
  auto total_memory = Find<MemFn>(driver, "cuDeviceTotalMem_v2");
  auto attribute = Find<AttributeFn>(driver, "cuDeviceGetAttribute");
  if (!init || !driver_version || !device_count || !device_name || !total_memory ||
      !attribute) {
    std::printf("no CUDA device (libcuda.so.1 lacks a basic driver function)\n");
    return kNoDevice;
  }
  int version = 0;
  if (int error = init(0); error != 0) {
    std::printf("no CUDA device (cuInit failed with CUDA error %d)\n", error);
    return kNoDevice;
  }
  driver_version(&version);
  int count = 0;
  if (device_count(&count) != 0 || count == 0) {
    std::printf("no CUDA device (the driver, CUDA %d.%d, reports none)\n", version / 1000,
                version % 1000 / 10);
    return kNoDevice;
  }
  if (version < kRuntimeNeeds) {
    std::printf("no CUDA device usable (the driver supports CUDA %d.%d; TensorFlow 2.14's "
                "runtime needs 11.8 or newer)\n", version / 1000, version % 1000 / 10);
    return kNoDevice;
  }
  std::printf("driver: CUDA %d.%d, %d device(s)\n", version / 1000, version % 1000 / 10, count);
  for (int device = 0; device < count; ++device) {
    char name[256] = {};
    size_t bytes = 0;
    int major = 0, minor = 0;
    device_name(name, sizeof(name), device);
    total_memory(&bytes, device);
    attribute(&major, kComputeCapabilityMajor, device);
    attribute(&minor, kComputeCapabilityMinor, device);
    std::printf("device %d: %s, compute capability %d.%d, %.1f GiB\n", device, name, major,
                minor, bytes / 1073741824.0);
  }
  return 0;
}
