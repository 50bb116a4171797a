// lms_device_probe: says whether a CUDA device is usable here (exit 0) or
// why not (exit 4, run-gpu.sh's "no CUDA device" code). Prints one line per
// device: index, name, compute capability, memory.

#include <cuda_runtime_api.h>

#include <cstdio>

int main() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    std::printf("no CUDA device (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status)
                                      : "cudaGetDeviceCount found none");
    return 4;
  }
  int driver = 0;
  int runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess ||
      cudaRuntimeGetVersion(&runtime) != cudaSuccess) {
    std::printf("no CUDA device (cannot read the driver and runtime versions)\n");
    return 4;
  }
  std::printf("driver %d, runtime %d\n", driver, runtime);
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    status = cudaGetDeviceProperties(&prop, i);
    if (status != cudaSuccess) {
      std::printf("no CUDA device (device %d: %s)\n", i, cudaGetErrorString(status));
      return 4;
    }
    std::printf("cuda:%d %s sm_%d%d %.1f GiB\n", i, prop.name, prop.major, prop.minor,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  }
  return 0;
}
