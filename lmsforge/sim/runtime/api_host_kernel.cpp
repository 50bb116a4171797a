// The simulator's own entry points (include/lms_cuda_sim.h).

#include "api.h"
#include "calibration.h"
#include "memory.h"

#include <lms_cuda_sim.h>

#include <cstring>
#include <string>
#include <vector>

using namespace lms_sim;

static_assert(LMS_SIM_SPARSE_STRIDE == kSparseStride && LMS_SIM_SPARSE_WINDOW == kSparseWindow,
              "lms_cuda_sim.h must name the windows the engine moves");

extern "C" {

cudaError_t lmsSimLaunchHostKernel(cudaStream_t stream, const char* name, lmsSimKernelFn fn,
                                   const void* args, size_t args_bytes,
                                   const lmsSimKernelWork* work) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (fn == nullptr || name == nullptr || (args == nullptr && args_bytes != 0)) {
      return kErrorInvalidValue;
    }
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    if (target->device != runtime.current_with_context().index) {
      return kErrorInvalidResourceHandle;  // as for any kernel launch
    }
    auto copied = std::make_shared<std::vector<uint8_t>>(args_bytes);
    if (args_bytes != 0) {
      std::memcpy(copied->data(), args, args_bytes);
    }
    Op op;
    op.kind = OpKind::kKernel;
    op.device = target->device;
    op.what = std::string("kernel ") + name;
    op.body = [fn, copied](ExecContext&) { return static_cast<Status>(fn(copied->data())); };
    if (work != nullptr) {
      op.work = Work{Engine::kCompute, 0,
                     Timing::kernel_ns(work->memory_bytes, work->alu_ops, work->requested_ns)};
    }
    Timing::get().charge(HostCall::kLaunch);
    return runtime.submit(target, std::move(op));
  });
}

const char* lmsSimCalibration(void) {
  static const std::string json = calibration_json();
  return json.c_str();
}

void* lmsSimDeviceBytes(const void* ptr, size_t bytes) {
  return Runtime::get().device_bytes(ptr, bytes);
}

} // extern "C"
