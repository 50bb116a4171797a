// Streams, events, host functions and stream capture.

#include "api.h"
#include "capture.h"

#include <algorithm>

namespace lms_sim {

namespace {

// cudaDeviceGetStreamPriorityRange of an H100: 0 (least) .. -5 (greatest).
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

Status resolve_both(Runtime& runtime, cudaEvent_t event, cudaStream_t stream,
                         std::shared_ptr<EventState>* e, StreamRef* s) {
  Status status = kSuccess;
  *e = runtime.resolve(event, &status);
  if (status != kSuccess) {
    return status;
  }
  *s = runtime.resolve(stream, &status);
  return status;
}

// The event's last record: no stream if it was never recorded (complete, as
// CUDA defines it); kErrorCapturedEvent if it was recorded in a capture.
struct Record {
  StreamRef stream;
  uint64_t position = 0;
  std::shared_ptr<Timestamp> stamp;
};

Status last_record(EventState& event, Record* record) {
  std::lock_guard<std::mutex> guard(event.mutex);
  if (event.capture) {
    return kErrorCapturedEvent;
  }
  *record = Record{event.stream, event.position, event.stamp};
  return kSuccess;
}

Status create_stream(Runtime& runtime, cudaStream_t* stream, unsigned flags,
                          int priority) {
  if (stream == nullptr || (flags & ~unsigned(cudaStreamNonBlocking)) != 0) {
    return kErrorInvalidValue;
  }
  Device& device = runtime.current_with_context();
  // Out-of-range priorities are clamped, as the runtime documents.
  priority = std::min(kLeastPriority, std::max(kGreatestPriority, priority));
  *stream = runtime.create_stream(device.index, flags, priority);
  return kSuccess;
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
    return kSuccess;
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
      return kErrorInvalidResourceHandle;
    }
    return runtime.destroy_stream(stream);
  });
}

cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int* priority) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = kSuccess;
    StreamRef stream = runtime.resolve(hStream, &status);
    if (status == kSuccess && priority == nullptr) {
      status = kErrorInvalidValue;
    }
    if (status == kSuccess) {
      *priority = stream->priority;
    }
    return status;
  });
}

cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int* flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = kSuccess;
    StreamRef stream = runtime.resolve(hStream, &status);
    if (status == kSuccess && flags == nullptr) {
      status = kErrorInvalidValue;
    }
    if (status == kSuccess) {
      *flags = stream->flags;
    }
    return status;
  });
}

cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int* device) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = kSuccess;
    StreamRef stream = runtime.resolve(hStream, &status);
    if (status == kSuccess && device == nullptr) {
      status = kErrorInvalidValue;
    }
    if (status == kSuccess) {
      *device = stream->device;
    }
    return status;
  });
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    {
      Captures& captures = Captures::get();
      std::lock_guard<std::mutex> guard(captures.mutex());
      if (target->capture) {
        captures.invalidate_locked(*target->capture, "cudaStreamQuery of a capturing stream");
        return kErrorStreamCaptureUnsupported;
      }
    }
    status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
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
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    {
      Captures& captures = Captures::get();
      std::lock_guard<std::mutex> guard(captures.mutex());
      if (target->capture) {
        captures.invalidate_locked(*target->capture,
                                   "cudaStreamSynchronize of a capturing stream");
        return kErrorStreamCaptureUnsupported;
      }
      if (target->kind == StreamKind::kLegacy) {
        status = captures.check_legacy_locked(target->device);
        if (status != kSuccess) {
          return status;
        }
      }
    }
    status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    return runtime.synchronize_stream(target);
  });
}

cudaError_t cudaDeviceSynchronize(void) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    return runtime.synchronize_device(runtime.current_with_context().index);
  });
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (fn == nullptr) {
      return kErrorInvalidValue;
    }
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    Op op;
    op.kind = OpKind::kHostFunc;
    op.device = target->device;
    op.what = "cudaLaunchHostFunc";
    op.body = [fn, userData](ExecContext&) {
      fn(userData);
      return kSuccess;
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
      return kErrorInvalidValue;
    }
    *event = runtime.create_event(runtime.current_with_context().index, cudaEventDefault);
    return kSuccess;
  });
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming |
        cudaEventInterprocess;
    if (event == nullptr || (flags & ~kKnown) != 0 ||
        ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))) {
      return kErrorInvalidValue;
    }
    *event = runtime.create_event(runtime.current_with_context().index, flags);
    return kSuccess;
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
    Status status = resolve_both(runtime, event, stream, &e, &s);
    if (status != kSuccess) {
      return status;
    }
    // "cudaEventRecord() will fail if the input event and input stream are
    // associated to different devices" (programming guide).
    if (e->device != s->device) {
      return kErrorInvalidResourceHandle;
    }
    Captures& captures = Captures::get();
    std::lock_guard<std::mutex> guard(captures.mutex());
    if (s->capture) {
      captures.record_event_locked(s, *e);
      return kSuccess;
    }
    if (s->kind == StreamKind::kLegacy) {
      status = captures.check_legacy_locked(s->device);
      if (status != kSuccess) {
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
    return kSuccess;
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
    Status status = kSuccess;
    std::shared_ptr<EventState> e = runtime.resolve(event, &status);
    if (status != kSuccess) {
      return status;
    }
    Record record;
    status = last_record(*e, &record);
    if (status != kSuccess) {
      return status;
    }
    status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    Timing::get().charge(HostCall::kEventQuery);
    if (!record.stream) {
      return kSuccess;
    }
    return runtime.observe(record.stamp->virtual_end,
                           [&] { return record.stream->reached(record.position); }, e->device);
  });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = kSuccess;
    std::shared_ptr<EventState> e = runtime.resolve(event, &status);
    if (status != kSuccess) {
      return status;
    }
    Record record;
    status = last_record(*e, &record);
    if (status != kSuccess) {
      return status;
    }
    status = Captures::get().check_unsafe(function);
    if (status != kSuccess) {
      return status;
    }
    if (!record.stream) {
      return kSuccess;
    }
    return runtime.wait(record.stream, Position{record.position, record.stamp->virtual_end});
  });
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (ms == nullptr) {
      return kErrorInvalidValue;
    }
    Status status = kSuccess;
    std::shared_ptr<EventState> first = runtime.resolve(start, &status);
    std::shared_ptr<EventState> last =
        status == kSuccess ? runtime.resolve(end, &status) : nullptr;
    if (status != kSuccess) {
      return status;
    }
    std::shared_ptr<Timestamp> from, to;
    for (auto [event, stamp] : {std::pair{first, &from}, std::pair{last, &to}}) {
      std::lock_guard<std::mutex> guard(event->mutex);
      if (event->capture) {
        return kErrorCapturedEvent;
      }
      if ((event->flags & cudaEventDisableTiming) || !event->stamp) {
        return kErrorInvalidResourceHandle;  // no timing, or never recorded
      }
      *stamp = event->stamp;
    }
    if (first->device != last->device) {
      return kErrorInvalidResourceHandle;
    }
    // Virtual time: what the work between the records takes on the
    // calibrated GPU (timing.h).
    status = runtime.observe(std::max(from->virtual_end, to->virtual_end), [&] {
      return from->reached.load(std::memory_order_acquire) &&
          to->reached.load(std::memory_order_acquire);
    }, first->device);
    if (status != kSuccess) {
      return status;
    }
    *ms = static_cast<float>((to->virtual_end - from->virtual_end) / 1e6);
    return kSuccess;
  });
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (flags != cudaEventWaitDefault) {
      if (flags == cudaEventWaitExternal) {
        not_simulated(function, "cudaEventWaitExternal");
      }
      return kErrorInvalidValue;
    }
    std::shared_ptr<EventState> e;
    StreamRef s;
    Status status = resolve_both(runtime, event, stream, &e, &s);
    if (status != kSuccess) {
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
      if (status != kSuccess || captured || s->capture) {
        return status;
      }
    }
    if (s->kind == StreamKind::kLegacy) {
      status = captures.check_legacy_locked(s->device);
      if (status != kSuccess) {
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
    return kSuccess;
  });
}

// ---- stream capture and graphs ---------------------------------------------

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    return Captures::get().begin(target, static_cast<CaptureMode>(mode));
  });
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (pGraph == nullptr) {
      return kErrorInvalidValue;
    }
    *pGraph = nullptr;
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    std::vector<CaptureNode> nodes;
    status = Captures::get().end(target, &nodes);
    if (status == kSuccess) {
      *pGraph = new CUgraph_st{std::move(nodes)};
    }
    return status;
  });
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (pCaptureStatus == nullptr) {
      return kErrorInvalidValue;
    }
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    CaptureStatus captured = kCaptureStatusNone;
    status = Captures::get().status(target, &captured, nullptr);
    if (status == kSuccess) {
      *pCaptureStatus = static_cast<cudaStreamCaptureStatus>(captured);
    }
    return status;
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
      return kErrorInvalidValue;
    }
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    CaptureStatus captured = kCaptureStatusNone;
    status = Captures::get().status(target, &captured, id_out);
    if (status == kSuccess) {
      *captureStatus_out = static_cast<cudaStreamCaptureStatus>(captured);
    }
    return status;
  });
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (mode == nullptr || (*mode != cudaStreamCaptureModeGlobal &&
                            *mode != cudaStreamCaptureModeThreadLocal &&
                            *mode != cudaStreamCaptureModeRelaxed)) {
      return kErrorInvalidValue;
    }
    *mode = static_cast<cudaStreamCaptureMode>(
        Captures::get().exchange_mode(static_cast<CaptureMode>(*mode)));
    return kSuccess;
  });
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph,
                                 unsigned long long flags) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (pGraphExec == nullptr || graph == nullptr) {
      return kErrorInvalidValue;
    }
    if (flags != 0) {
      not_simulated("cudaGraphInstantiate", "instantiation flags");
    }
    auto* exec = new CUgraphExec_st{};
    for (const CaptureNode& node : graph->nodes) {
      exec->ops.push_back(node.op);  // recorded in an order that respects every edge
    }
    *pGraphExec = exec;
    return kSuccess;
  });
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  const char* function = __func__;
  return api_call(function, [&](Runtime& runtime) {
    if (graphExec == nullptr) {
      return kErrorInvalidValue;
    }
    Status status = kSuccess;
    StreamRef target = runtime.resolve(stream, &status);
    if (status != kSuccess) {
      return status;
    }
    // Replayed in order on the launch stream: the same addresses as captured.
    Timing::get().charge(HostCall::kLaunch);
    for (const Op& op : graphExec->ops) {
      status = runtime.submit(target, op);
      if (status != kSuccess) {
        return status;
      }
    }
    return kSuccess;
  });
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (graph == nullptr) {
      return kErrorInvalidValue;
    }
    delete graph;
    return kSuccess;
  });
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  const char* function = __func__;
  return api_call(function, [&](Runtime&) {
    if (graphExec == nullptr) {
      return kErrorInvalidValue;
    }
    delete graphExec;
    return kSuccess;
  });
}

} // extern "C"
