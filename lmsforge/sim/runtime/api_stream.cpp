// Streams, events, host functions and stream capture.

#include "api.h"
#include "capture.h"

#include <algorithm>

namespace lms_sim {

namespace {

// cudaDeviceGetStreamPriorityRange of an H100: 0 (least) .. -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

cudaError_t resolve_both(Runtime& runtime, cudaEvent_t event, cudaStream_t stream,
                         std::shared_ptr<EventState>* e, StreamRef* s) {
  cudaError_t status = cudaSuccess;
  *e = runtime.resolve(event, &status);
  if (status != cudaSuccess) {
    return status;
  }
  *s = runtime.resolve(stream, &status);
  return status;
}

// The event's last record: no stream if it was never recorded (complete, as
// CUDA defines it); cudaErrorCapturedEvent if it was recorded in a capture.
struct Record {
  StreamRef stream;
  uint64_t position = 0;
  std::shared_ptr<Timestamp> stamp;
};

cudaError_t last_record(EventState& event, Record* record) {
  std::lock_guard<std::mutex> guard(event.mutex);
  if (event.capture) {
    return cudaErrorCapturedEvent;
  }
  *record = Record{event.stream, event.position, event.stamp};
  return cudaSuccess;
}

cudaError_t create_stream(Runtime& runtime, cudaStream_t* stream, unsigned flags,
                          int priority) {
  if (stream == nullptr || (flags & ~unsigned(cudaStreamNonBlocking)) != 0) {
    return cudaErrorInvalidValue;
  }
  Device& device = runtime.current_with_context();
  // Out-of-range priorities are clamped, as the runtime documents.
  priority = std::min(kLeastPriority, std::max(kGreatestPriority, priority));
  *stream = runtime.create_stream(device.index, flags, priority);
  return cudaSuccess;
}

} // namespace

} // namespace lms_sim

using namespace lms_sim;

extern "C" {

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (leastPriority != nullptr) {
      *leastPriority = kLeastPriority;
    }
    if (greatestPriority != nullptr) {
      *greatestPriority = kGreatestPriority;
    }
    return cudaSuccess;
  });
}

cudaError_t cudaStreamCreate(cudaStream_t* pStream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    return create_stream(runtime, pStream, cudaStreamDefault, 0);
  });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    return create_stream(runtime, pStream, flags, 0);
  });
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags,
                                         int priority) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    return create_stream(runtime, pStream, flags, priority);
  });
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
      return cudaErrorInvalidResourceHandle;
    }
    return runtime.destroy_stream(stream);
  });
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    StreamRef stream = runtime.resolve(hStream, &status);
    if (status == cudaSuccess && priority == nullptr) {
      status = cudaErrorInvalidValue;
    }
    if (status == cudaSuccess) {
      *priority = stream->priority;
    }
    return status;
  });
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    StreamRef stream = runtime.resolve(hStream, &status);
    if (status == cudaSuccess && flags == nullptr) {
      status = cudaErrorInvalidValue;
    }
    if (status == cudaSuccess) {
      *flags = stream->flags;
    }
    return status;
  });
}

cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    StreamRef stream = runtime.resolve(hStream, &status);
    if (status == cudaSuccess && device == nullptr) {
      status = cudaErrorInvalidValue;
    }
    if (status == cudaSuccess) {
      *device = stream->device;
    }
    return status;
  });
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    {
      Captures& captures = Captures::get();
      std::lock_guard<std::mutex> guard(captures.mutex());
      if (target->capture) {
        captures.invalidate_locked(*target->capture, "cudaStreamQuery of a capturing stream");
        return cudaErrorStreamCaptureUnsupported;
      }
    }
    status = Captures::get().check_unsafe(function);
    if (status != cudaSuccess) {
      return status;
    }
    Timing::get().charge(HostCall::kStreamQuery);
    return runtime.observe(runtime.stream_end(target),
                           [&] { return runtime.stream_idle(target); }, target->device);
  });
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    {
      Captures& captures = Captures::get();
      std::lock_guard<std::mutex> guard(captures.mutex());
      if (target->capture) {
        captures.invalidate_locked(*target->capture,
                                   "cudaStreamSynchronize of a capturing stream");
        return cudaErrorStreamCaptureUnsupported;
      }
      if (target->kind == StreamKind::kLegacy) {
        status = captures.check_legacy_locked(target->device);
        if (status != cudaSuccess) {
          return status;
        }
      }
    }
    status = Captures::get().check_unsafe(function);
    if (status != cudaSuccess) {
      return status;
    }
    return runtime.synchronize_stream(target);
  });
}

cudaError_t cudaDeviceSynchronize(void) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = Captures::get().check_unsafe(function);
    if (status != cudaSuccess) {
      return status;
    }
    return runtime.synchronize_device(runtime.current_with_context().index);
  });
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (fn == nullptr) {
      return cudaErrorInvalidValue;
    }
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    Op op;
    op.kind = OpKind::kHostFunc;
    op.device = target->device;
    op.what = "cudaLaunchHostFunc";
    op.body = [fn, userData](ExecContext&) {
      fn(userData);
      return cudaSuccess;
    };
    // Its virtual time is none: a host function's time is the host's.
    Timing::get().charge(HostCall::kLaunch);
    return runtime.submit(target, std::move(op));
  });
}

// ---- events ---------------------------------------------------------------

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (event == nullptr) {
      return cudaErrorInvalidValue;
    }
    *event = runtime.create_event(runtime.current_with_context().index, cudaEventDefault);
    return cudaSuccess;
  });
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming |
        cudaEventInterprocess;
    if (event == nullptr || (flags & ~kKnown) != 0 ||
        ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))) {
      return cudaErrorInvalidValue;
    }
    *event = runtime.create_event(runtime.current_with_context().index, flags);
    return cudaSuccess;
  });
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) { return runtime.destroy_event(event); });
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    std::shared_ptr<EventState> e;
    StreamRef s;
    cudaError_t status = resolve_both(runtime, event, stream, &e, &s);
    if (status != cudaSuccess) {
      return status;
    }
    // "cudaEventRecord() will fail if the input event and input stream are
    // associated to different devices" (programming guide).
    if (e->device != s->device) {
      return cudaErrorInvalidResourceHandle;
    }
    Captures& captures = Captures::get();
    std::lock_guard<std::mutex> guard(captures.mutex());
    if (s->capture) {
      captures.record_event_locked(s, *e);
      return cudaSuccess;
    }
    if (s->kind == StreamKind::kLegacy) {
      status = captures.check_legacy_locked(s->device);
      if (status != cudaSuccess) {
        return status;
      }
    }
    Op marker;
    marker.device = s->device;
    marker.what = "cudaEventRecord";
    marker.stamp = std::make_shared<Timestamp>();
    std::shared_ptr<Timestamp> stamp = marker.stamp;
    Timing::get().charge(HostCall::kEventRecord);
    std::lock_guard<std::mutex> event_guard(e->mutex);
    e->position = runtime.append(s, std::move(marker)).index;
    e->stream = s;
    e->stamp = stamp;
    e->capture.reset();
    e->capture_nodes.clear();
    return cudaSuccess;
  });
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  if (flags != cudaEventRecordDefault) {
    not_simulated(__func__, "flags other than cudaEventRecordDefault");
  }
  return cudaEventRecord(event, stream);
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    std::shared_ptr<EventState> e = runtime.resolve(event, &status);
    if (status != cudaSuccess) {
      return status;
    }
    Record record;
    status = last_record(*e, &record);
    if (status != cudaSuccess) {
      return status;
    }
    status = Captures::get().check_unsafe(function);
    if (status != cudaSuccess) {
      return status;
    }
    Timing::get().charge(HostCall::kEventQuery);
    if (!record.stream) {
      return cudaSuccess;
    }
    return runtime.observe(record.stamp->virtual_end,
                           [&] { return record.stream->reached(record.position); }, e->device);
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    std::shared_ptr<EventState> e = runtime.resolve(event, &status);
    if (status != cudaSuccess) {
      return status;
    }
    Record record;
    status = last_record(*e, &record);
    if (status != cudaSuccess) {
      return status;
    }
    status = Captures::get().check_unsafe(function);
    if (status != cudaSuccess) {
      return status;
    }
    if (!record.stream) {
      return cudaSuccess;
    }
    return runtime.wait(record.stream, Position{record.position, record.stamp->virtual_end});
  });
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (ms == nullptr) {
      return cudaErrorInvalidValue;
    }
    cudaError_t status = cudaSuccess;
    std::shared_ptr<EventState> first = runtime.resolve(start, &status);
    std::shared_ptr<EventState> last =
        status == cudaSuccess ? runtime.resolve(end, &status) : nullptr;
    if (status != cudaSuccess) {
      return status;
    }
    std::shared_ptr<Timestamp> from, to;
    for (auto [event, stamp] : {std::pair{first, &from}, std::pair{last, &to}}) {
      std::lock_guard<std::mutex> guard(event->mutex);
      if (event->capture) {
        return cudaErrorCapturedEvent;
      }
      if ((event->flags & cudaEventDisableTiming) || !event->stamp) {
        return cudaErrorInvalidResourceHandle;  // no timing, or never recorded
      }
      *stamp = event->stamp;
    }
    if (first->device != last->device) {
      return cudaErrorInvalidResourceHandle;
    }
    // Virtual time: what the work between the records takes on the
    // calibrated GPU (timing.h).
    status = runtime.observe(std::max(from->virtual_end, to->virtual_end), [&] {
      return from->reached.load(std::memory_order_acquire) &&
          to->reached.load(std::memory_order_acquire);
    }, first->device);
    if (status != cudaSuccess) {
      return status;
    }
    *ms = static_cast<float>((to->virtual_end - from->virtual_end) / 1e6);
    return cudaSuccess;
  });
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (flags != cudaEventWaitDefault) {
      if (flags == cudaEventWaitExternal) {
        not_simulated(function, "cudaEventWaitExternal");
      }
      return cudaErrorInvalidValue;
    }
    std::shared_ptr<EventState> e;
    StreamRef s;
    cudaError_t status = resolve_both(runtime, event, stream, &e, &s);
    if (status != cudaSuccess) {
      return status;
    }
    Captures& captures = Captures::get();
    std::lock_guard<std::mutex> guard(captures.mutex());
    bool captured = false;
    {
      std::lock_guard<std::mutex> event_guard(e->mutex);
      captured = static_cast<bool>(e->capture);
    }
    if (captured || s->capture) {
      status = captures.wait_event_locked(s, *e);
      if (status != cudaSuccess || captured || s->capture) {
        return status;
      }
    }
    if (s->kind == StreamKind::kLegacy) {
      status = captures.check_legacy_locked(s->device);
      if (status != cudaSuccess) {
        return status;
      }
    }
    // Waits for the record as it is now; later records do not matter. Works
    // across devices, as CUDA allows.
    Op marker;
    marker.device = s->device;
    marker.what = "cudaStreamWaitEvent";
    {
      std::lock_guard<std::mutex> event_guard(e->mutex);
      if (e->stream) {
        marker.waits.push_back(Dependency{e->stream, e->position});
        marker.not_before = e->stamp->virtual_end;
      }
    }
    Timing::get().charge(HostCall::kStreamWaitEvent);
    runtime.append(s, std::move(marker));
    return cudaSuccess;
  });
}

// ---- stream capture and graphs ---------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    return Captures::get().begin(target, mode);
  });
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (pGraph == nullptr) {
      return cudaErrorInvalidValue;
    }
    *pGraph = nullptr;
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    std::vector<CaptureNode> nodes;
    status = Captures::get().end(target, &nodes);
    if (status == cudaSuccess) {
      *pGraph = new CUgraph_st{std::move(nodes)};
    }
    return status;
  });
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (pCaptureStatus == nullptr) {
      return cudaErrorInvalidValue;
    }
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    return Captures::get().status(target, pCaptureStatus, nullptr);
  });
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream,
                                     cudaStreamCaptureStatus* captureStatus_out,
                                     unsigned long long* id_out, cudaGraph_t* graph_out,
                                     const cudaGraphNode_t** dependencies_out,
                                     const cudaGraphEdgeData** edgeData_out,
                                     size_t* numDependencies_out) {
  if (graph_out != nullptr || dependencies_out != nullptr || edgeData_out != nullptr ||
      numDependencies_out != nullptr) {
    not_simulated(__func__, "the graph, dependency and edge outputs");
  }
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (captureStatus_out == nullptr) {
      return cudaErrorInvalidValue;
    }
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    return Captures::get().status(target, captureStatus_out, id_out);
  });
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (mode == nullptr || (*mode != cudaStreamCaptureModeGlobal &&
                            *mode != cudaStreamCaptureModeThreadLocal &&
                            *mode != cudaStreamCaptureModeRelaxed)) {
      return cudaErrorInvalidValue;
    }
    *mode = Captures::get().exchange_mode(*mode);
    return cudaSuccess;
  });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (pGraphExec == nullptr || graph == nullptr) {
      return cudaErrorInvalidValue;
    }
    if (flags != 0) {
      not_simulated("cudaGraphInstantiate", "instantiation flags");
    }
    auto* exec = new CUgraphExec_st{};
    for (const CaptureNode& node : graph->nodes) {
      exec->ops.push_back(node.op);  // recorded in an order that respects every edge
    }
    *pGraphExec = exec;
    return cudaSuccess;
  });
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (graphExec == nullptr) {
      return cudaErrorInvalidValue;
    }
    cudaError_t status = cudaSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != cudaSuccess) {
      return status;
    }
    // Replayed in order on the launch stream: the same addresses as captured.
    Timing::get().charge(HostCall::kLaunch);
    for (const Op& op : graphExec->ops) {
      status = runtime.submit(target, op);
      if (status != cudaSuccess) {
        return status;
      }
    }
    return cudaSuccess;
  });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (graph == nullptr) {
      return cudaErrorInvalidValue;
    }
    delete graph;
    return cudaSuccess;
  });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (graphExec == nullptr) {
      return cudaErrorInvalidValue;
    }
    delete graphExec;
    return cudaSuccess;
  });
}

} // extern "C"
