// The driver API as programs reach it through cudaGetDriverEntryPoint(ByVersion):
// PTX modules whose kernels have host implementations (kernels.h), kernel
// launches on streams, and the primary context state that c10's device guard
// asks about. Nothing here is exported under its driver name: c10_cuda does
// not link libcuda.

#include "api.h"
#include "kernels.h"

#include <cuda.h>

#include <cstring>
#include <memory>

struct CUfunc_st {
  const lms_sim::HostKernel* kernel;
};

struct CUmod_st {
  std::vector<std::unique_ptr<CUfunc_st>> functions;
  std::vector<std::string> names;
};

namespace lms_sim {

namespace {

// The runtime's codes that the driver paths return have the same numbers in
// CUresult (1, 2, 101, 400, 600, 700, 800, 801, 900-908).
CUresult as_driver(cudaError_t status) {
  return static_cast<CUresult>(status);
}

CUresult CUDAAPI sim_cuModuleLoadData(CUmodule* module, const void* image) {
  if (module == nullptr || image == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Runtime& runtime = Runtime::get();
  if (!runtime.device(runtime.current_device()).context.load()) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  std::vector<PtxEntry> entries = parse_ptx_entries(static_cast<const char*>(image));
  if (entries.empty()) {
    return CUDA_ERROR_INVALID_PTX;
  }
  auto loaded = std::make_unique<CUmod_st>();
  for (const PtxEntry& entry : entries) {
    const HostKernel* kernel = find_kernel(entry.name);
    if (kernel == nullptr || kernel->param_bytes != entry.param_bytes) {
      report("PTX entry " + entry.name +
             (kernel ? " does not have the parameters of its host implementation"
                     : " has no host implementation") +
             " in lmsforge/sim/kernels.cpp");
      return CUDA_ERROR_NOT_SUPPORTED;
    }
    loaded->functions.push_back(std::make_unique<CUfunc_st>(CUfunc_st{kernel}));
    loaded->names.push_back(entry.name);
  }
  *module = loaded.release();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_cuModuleGetFunction(CUfunction* function, CUmodule module,
                                         const char* name) {
  if (function == nullptr || module == nullptr || name == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < module->names.size(); ++i) {
    if (module->names[i] == name) {
      *function = module->functions[i].get();
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult CUDAAPI sim_cuModuleUnload(CUmodule module) {
  if (module == nullptr) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  delete module;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_cuLaunchKernel(CUfunction f, unsigned gridX, unsigned gridY,
                                    unsigned gridZ, unsigned blockX, unsigned blockY,
                                    unsigned blockZ, unsigned sharedMemBytes, CUstream hStream,
                                    void** kernelParams, void** extra) {
  if (extra != nullptr) {
    not_simulated("cuLaunchKernel", "the `extra` argument");
  }
  (void)sharedMemBytes;
  return as_driver(api_call("cuLaunchKernel", [&](Runtime& runtime) {
    if (f == nullptr) {
      return kErrorInvalidResourceHandle;
    }
    if (gridX * gridY * gridZ == 0 || blockX * blockY * blockZ == 0 ||
        blockX * blockY * blockZ > 1024 ||
        (kernelParams == nullptr && !f->kernel->param_bytes.empty())) {
      return kErrorInvalidValue;
    }
    Status status = kSuccess;
    StreamRef stream = runtime.resolve(reinterpret_cast<cudaStream_t>(hStream), &status);
    if (status != kSuccess) {
      return status;
    }
    // "A kernel launch will fail if it is issued to a stream that is not
    // associated to the current device" (programming guide).
    if (stream->device != runtime.current_with_context().index) {
      return kErrorInvalidResourceHandle;
    }
    // Arguments are copied at launch, as the driver does.
    std::vector<uint64_t> args(f->kernel->param_bytes.size(), 0);
    for (size_t i = 0; i < args.size(); ++i) {
      std::memcpy(&args[i], kernelParams[i], f->kernel->param_bytes[i]);
    }
    Op op;
    op.kind = OpKind::kKernel;
    op.device = stream->device;
    op.what = std::string("kernel ") + f->kernel->name;
    const HostKernel* kernel = f->kernel;
    op.body = [kernel, args](ExecContext&) { return kernel->run(args); };
    op.work = Work{Engine::kCompute, 0, kernel->duration_ns(args)};
    Timing::get().charge(HostCall::kLaunch);
    return runtime.submit(stream, std::move(op));
  }));
}

CUresult CUDAAPI sim_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  Runtime& runtime = Runtime::get();
  if (!runtime.valid_device(dev)) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  if (flags == nullptr || active == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *flags = 0;
  *active = runtime.device(dev).context.load() ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_cuDeviceGetCount(int* count) {
  if (count == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *count = Runtime::get().device_count();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_cuDriverGetVersion(int* version) {
  if (version == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *version = 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI sim_cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const char* found = error_string(static_cast<Status>(error));
  *text = std::strcmp(found, "unrecognized error code") == 0 ? nullptr : found;
  return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI sim_cuGetErrorName(CUresult error, const char** text) {
  if (text == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The driver spells names CUDA_ERROR_*; the simulator knows the runtime's.
  const char* found = error_name(static_cast<Status>(error));
  *text = std::strcmp(found, "unrecognized error code") == 0 ? nullptr : found;
  return *text ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

struct EntryPoint {
  const char* name;
  void* function;
};

const EntryPoint kEntryPoints[] = {
    {"cuModuleLoadData", reinterpret_cast<void*>(&sim_cuModuleLoadData)},
    {"cuModuleGetFunction", reinterpret_cast<void*>(&sim_cuModuleGetFunction)},
    {"cuModuleUnload", reinterpret_cast<void*>(&sim_cuModuleUnload)},
    {"cuLaunchKernel", reinterpret_cast<void*>(&sim_cuLaunchKernel)},
    {"cuDevicePrimaryCtxGetState", reinterpret_cast<void*>(&sim_cuDevicePrimaryCtxGetState)},
    {"cuDeviceGetCount", reinterpret_cast<void*>(&sim_cuDeviceGetCount)},
    {"cuDriverGetVersion", reinterpret_cast<void*>(&sim_cuDriverGetVersion)},
    {"cuGetErrorString", reinterpret_cast<void*>(&sim_cuGetErrorString)},
    {"cuGetErrorName", reinterpret_cast<void*>(&sim_cuGetErrorName)},
};

Status entry_point(const char* symbol, void** funcPtr, unsigned long long flags,
                        cudaDriverEntryPointQueryResult* driverStatus) {
  if (symbol == nullptr || funcPtr == nullptr ||
      (flags != cudaEnableDefault && flags != cudaEnableLegacyStream &&
       flags != cudaEnablePerThreadDefaultStream)) {
    return kErrorInvalidValue;
  }
  for (const EntryPoint& entry : kEntryPoints) {
    if (std::strcmp(entry.name, symbol) == 0) {
      *funcPtr = entry.function;
      if (driverStatus != nullptr) {
        *driverStatus = cudaDriverEntryPointSuccess;
      }
      return kSuccess;
    }
  }
  // As the runtime does for a symbol it cannot provide: success, no pointer.
  // The caller must check; the line below says what was missing.
  report(std::string("driver entry point ") + symbol + " is not simulated");
  *funcPtr = nullptr;
  if (driverStatus != nullptr) {
    *driverStatus = cudaDriverEntryPointSymbolNotFound;
  }
  return kSuccess;
}

} // namespace

} // namespace lms_sim

using namespace lms_sim;

extern "C" {

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr,
                                    unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    return entry_point(symbol, funcPtr, flags, driverStatus);
  });
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    // A version above the (simulated) driver's is invalid, as documented.
    if (cudaVersion > 13000) {
      return kErrorInvalidValue;
    }
    return entry_point(symbol, funcPtr, flags, driverStatus);
  });
}

} // extern "C"
