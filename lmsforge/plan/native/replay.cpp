// lms_plan_replay_sim / lms_plan_replay: replays one traced PyTorch training step (lmsforge
// plan) through the series' real CUDA caching allocator and LMS, linked against lmsforge's
// simulated CUDA runtime (replay_device_sim.cpp) or run on a GPU (replay_device_gpu.cu, the
// check of the simulated figures: bench/plan_replay_gpu.py). Nothing here models the
// allocator: every storage is a c10::StorageImpl from
// CUDACachingAllocator, pinned the way at::LmsPinGuard pins an operator's arguments, and read
// or written through the same accessors ATen's kernels use, so LMS pages it as in training.
//
// Input: the replay script lmsforge.plan.replay writes from a trace for one GPU profile
// (docs/plan-trace-format.md, "The replay script"). Settings come from where a user sets
// them: PYTORCH_CUDA_ALLOC_CONF (lms, lms_limit and the knobs) and the simulator's LMS_SIM_*
// variables (device memory, the link's calibration, sparse data).
//
// Per operator: open a PinScope, pin what it reads and writes, create what it allocates
// (pinned until the scope closes, as an operator's outputs are), take the data pointers
// (which pages reclaimed storages in), launch a kernel that takes the traced duration (virtual
// time on the simulator), checks every read storage's sample windows against the pattern its
// last writer left and writes a new pattern into every written one (replay_device.h); close the scope, drop what
// the trace frees. Every step after the first replays the trace again: storages the trace
// allocates and never frees (optimizer state) exist by then and are written instead.
//
// With --plan, a plan of moves made from the trace (lmsforge.plan.played_plan, format in
// docs/plan-trace-format.md, "A plan of moves") is played from the second step on: before each
// operator, the page-outs and page-ins it lists for that operator are asked of LMS by name
// (c10::lms::page_out_planned, page_in_planned), as a policy that knew the order of uses
// would. LMS refuses what it must not move (a storage in use, one already out); its own
// policies still act on what the plan leaves.
//
// Output (JSON): per step its virtual time, bytes paged out and in, the LMS statistics under
// torch.cuda.memory_stats() names, and for the last step the allocator's memory after each
// operator. An allocation that fails ends the replay with the operator named (exit 0: running
// out of memory is an answer, not an error); wrong data is exit 1.

#include "common.h"
#include "primary_context.h"
#include "replay_device.h"
#include "torch_compat.h"

#include <c10/core/LargeModelSupport.h>
#include <c10/core/StorageImpl.h>
#include <c10/cuda/CUDAAllocatorConfig.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDALargeModelSupport.h>
#include <c10/cuda/CUDALmsHostPool.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using namespace lms_bench;
namespace Caching = c10::cuda::CUDACachingAllocator;
using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatType;
using StoragePtr = c10::intrusive_ptr<c10::StorageImpl>;
using lms_replay::Access;
using lms_replay::OperatorWork;

constexpr const char* kProgram = "lms_plan_replay";
constexpr const char* kScriptHeader = "lmsforge-replay 1";

struct Alloc {
  int64_t id;
  size_t bytes;
  bool kept;  // never freed by the step: exists from the second step on
};

struct Op {
  int64_t id;
  double duration_ns;
  bool first_step_only;  // makes optimizer state: a later step finds it and skips the operator
  std::vector<int64_t> reads, writes, frees;
  std::vector<Alloc> allocs;
};

struct Script {
  std::vector<std::pair<int64_t, size_t>> initial;
  std::vector<Op> ops;
};

std::vector<int64_t> read_ids(std::istringstream& in, const char* tag, size_t line) {
  std::string word;
  size_t count = 0;
  if (!(in >> word >> count) || word != tag) {
    throw UsageError("replay script line " + std::to_string(line) + ": expected " + tag);
  }
  std::vector<int64_t> ids(count);
  for (auto& id : ids) {
    if (!(in >> id)) {
      throw UsageError("replay script line " + std::to_string(line) + ": short " + tag);
    }
  }
  return ids;
}

Script read_script(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    throw UsageError("cannot read " + path);
  }
  std::string text;
  std::getline(file, text);
  if (text != kScriptHeader) {
    throw UsageError(path + " is not an lmsforge replay script (version 1)");
  }
  Script script;
  size_t line = 1;
  while (std::getline(file, text)) {
    ++line;
    std::istringstream in(text);
    std::string kind;
    in >> kind;
    if (kind == "initial") {
      int64_t id = 0;
      size_t bytes = 0;
      if (!(in >> id >> bytes)) {
        throw UsageError("replay script line " + std::to_string(line) + ": bad initial");
      }
      script.initial.emplace_back(id, bytes);
    } else if (kind == "op") {
      Op op;
      int once = 0;
      if (!(in >> op.id >> op.duration_ns >> once)) {
        throw UsageError("replay script line " + std::to_string(line) + ": bad op");
      }
      op.first_step_only = once != 0;
      op.reads = read_ids(in, "R", line);
      op.writes = read_ids(in, "W", line);
      std::string word;
      size_t count = 0;
      if (!(in >> word >> count) || word != "A") {
        throw UsageError("replay script line " + std::to_string(line) + ": expected A");
      }
      for (size_t i = 0; i < count; ++i) {
        Alloc alloc{};
        int kept = 0;
        if (!(in >> alloc.id >> alloc.bytes >> kept)) {
          throw UsageError("replay script line " + std::to_string(line) + ": short A");
        }
        alloc.kept = kept != 0;
        op.allocs.push_back(alloc);
      }
      op.frees = read_ids(in, "F", line);
      script.ops.push_back(std::move(op));
    } else if (!kind.empty()) {
      throw UsageError("replay script line " + std::to_string(line) + ": unknown record " +
                       kind);
    }
  }
  return script;
}

struct Live {
  StoragePtr storage;
  uint64_t version = 0;
};

struct StepFigures {
  double step_ms = 0;
  std::vector<std::pair<std::string, int64_t>> stats;  // memory_stats() keys
  std::vector<int64_t> allocated, reserved;  // after each operator (its allocations made)
  // When each operator ended on the compute stream, in microseconds from the step's start:
  // where a step stalled (waits for page-ins, for memory) shows as a gap before an operator.
  std::vector<int64_t> ended_us;
};

// An event after each operator of a step, destroyed with the step (an out-of-memory error
// included).
struct OperatorEnds {
  std::vector<cudaEvent_t> events;
  OperatorEnds() = default;
  OperatorEnds(const OperatorEnds&) = delete;
  OperatorEnds& operator=(const OperatorEnds&) = delete;
  ~OperatorEnds() {
    for (cudaEvent_t event : events) {
      cudaEventDestroy(event);
    }
  }
  void record(cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    LMS_BENCH_CUDA(cudaEventCreate(&event));
    events.push_back(event);
    LMS_BENCH_CUDA(cudaEventRecord(event, stream));
  }
};

// LMS's pinned host pool, which memory_stats() does not give: pinning a chunk stalls the other
// threads' CUDA calls on a GPU (about 0.6 ms per MiB on an H200), so a step that pins is slow
// there for a reason no other counter shows.
struct PoolFigures {
  int64_t held_bytes = 0, chunks_ahead = 0, chunks_on_demand = 0, ahead_without_room = 0;
};

PoolFigures pool_figures() {
  auto& pool = c10::cuda::lms::HostPool::instance();
  return {static_cast<int64_t>(pool.held_bytes()), pool.chunks_pinned_ahead(),
          pool.chunks_pinned_on_demand(), pool.ahead_without_room()};
}

// The step's share of the accumulated LMS counters, and the peaks since the step began, under
// the keys torch.cuda.memory_stats() gives them (torch/csrc/cuda/LargeModelSupport.cpp), and
// the host pool's under host_pool.*.
std::vector<std::pair<std::string, int64_t>> step_stats(const DeviceStats& before,
                                                        const DeviceStats& after,
                                                        const PoolFigures& pool_before,
                                                        const PoolFigures& pool_after) {
  std::vector<std::pair<std::string, int64_t>> s = {
      {"allocated_bytes.all.peak", aggregate_peak(after.allocated_bytes)},
      {"reserved_bytes.all.peak", aggregate_peak(after.reserved_bytes)},
      {"pinned_bytes.all.peak", aggregate_peak(after.pinned_bytes)},
      {"host_bytes.peak", after.host_bytes.peak},
      {"reclaimed", after.reclaimed - before.reclaimed},
      {"reclaimed_bytes", after.reclaimed_bytes - before.reclaimed_bytes},
      {"paged_in", after.paged_in - before.paged_in},
      {"paged_in_bytes", after.paged_in_bytes - before.paged_in_bytes},
  };
  for (size_t i = 0; i < c10::lms::kNumAllocSources; ++i) {
    s.emplace_back(std::string("alloc_distribution.") +
                       c10::lms::alloc_source_name(static_cast<c10::lms::AllocSource>(i)),
                   after.alloc_distribution[i] - before.alloc_distribution[i]);
  }
  const auto& a = after.lms_policy;
  const auto& b = before.lms_policy;
  s.insert(s.end(), {
      {"paged_out_ahead", a.paged_out_ahead - b.paged_out_ahead},
      {"paged_out_ahead_bytes", a.paged_out_ahead_bytes - b.paged_out_ahead_bytes},
      {"page_outs_ahead_skipped", a.page_outs_ahead_skipped - b.page_outs_ahead_skipped},
      {"page_out_waits", a.page_out_waits - b.page_out_waits},
      {"clean_reclaims", a.clean_reclaims - b.clean_reclaims},
      {"clean_reclaimed_bytes", a.clean_reclaimed_bytes - b.clean_reclaimed_bytes},
      {"prefetched", a.prefetched - b.prefetched},
      {"prefetched_bytes", a.prefetched_bytes - b.prefetched_bytes},
      {"prefetch_hits", a.prefetch_hits - b.prefetch_hits},
      {"prefetch_misses", a.prefetch_misses - b.prefetch_misses},
      {"prefetch_wasted", a.prefetch_wasted - b.prefetch_wasted},
      {"prefetch_wasted_bytes", a.prefetch_wasted_bytes - b.prefetch_wasted_bytes},
      {"page_in_wait_us", a.page_in_wait_us - b.page_in_wait_us},
      {"host_pool.held_bytes", pool_after.held_bytes},
      {"host_pool.chunks_pinned_ahead", pool_after.chunks_ahead - pool_before.chunks_ahead},
      {"host_pool.chunks_pinned_on_demand",
       pool_after.chunks_on_demand - pool_before.chunks_on_demand},
      {"host_pool.ahead_without_room",
       pool_after.ahead_without_room - pool_before.ahead_without_room},
  });
  return s;
}

// Per operator id, the storages to page out and to page in before it runs.
struct MovePlan {
  std::unordered_map<int64_t, std::vector<int64_t>> out, in;
};

MovePlan read_plan(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw UsageError("cannot read the plan " + path);
  }
  MovePlan plan;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    number += 1;
    std::istringstream words(line);
    std::string kind;
    int64_t op = 0;
    if (!(words >> kind) || kind[0] == '#') {
      continue;
    }
    if ((kind != "out" && kind != "in") || !(words >> op)) {
      throw UsageError(path + " line " + std::to_string(number) +
                       ": expected 'out OP STORAGE...' or 'in OP STORAGE...'");
    }
    auto& storages = (kind == "out" ? plan.out : plan.in)[op];
    int64_t id = 0;
    while (words >> id) {
      storages.push_back(id);
    }
  }
  return plan;
}

// How many planned moves were asked for and how many LMS started.
struct MoveCounts {
  int64_t outs_asked = 0, outs_started = 0, ins_asked = 0, ins_started = 0;
  int64_t ins_retried_started = 0;  // refused when asked, started before their use
};

class Replay {
 public:
  Replay(const Script& script, MovePlan plan) : script_(script), plan_(std::move(plan)) {
    stream_ = c10::cuda::getCurrentCUDAStream(0).stream();
  }

  const MoveCounts& moves() const { return moves_; }

  // Runs one step; false when an allocation failed (oom_ then says where). With
  // `mark_steps`, each step begins at a step boundary of LMS's recorded-order policy
  // (c10::cuda::lms::mark_step, what torch.cuda.lms_step() calls).
  bool step(int number, StepFigures* figures, bool mark_steps = false) {
    if (mark_steps) {
      c10::cuda::lms::mark_step(0);
    }
    Caching::resetPeakStats(0);
    DeviceStats before = Caching::getDeviceStats(0);
    PoolFigures pool_before = pool_figures();
    cudaEvent_t start = nullptr, stop = nullptr;
    LMS_BENCH_CUDA(cudaEventCreate(&start));
    LMS_BENCH_CUDA(cudaEventCreate(&stop));
    LMS_BENCH_CUDA(cudaEventRecord(start, stream_));
    int64_t current = -1;
    OperatorEnds ended;  // one event per operator run
    try {
      // A new batch each step: inputs the trace let go of are made again.
      for (const auto& [id, bytes] : script_.initial) {
        if (live_.count(id) == 0) {
          create(id, bytes);
          write_alone(id);
        }
      }
      for (const Op& op : script_.ops) {
        if (number > 0 && op.first_step_only) {
          continue;
        }
        current = op.id;
        if (number > 0) {
          play_moves(op);
        }
        run_op(op, number, figures);
        ended.record(stream_);
      }
    } catch (const c10::OutOfMemoryError& error) {
      oom_ = "step " + std::to_string(number) + " operator " + std::to_string(current) + ": " +
          first_line(error.what_without_backtrace());
      oom_op_ = current;
      return false;
    }
    LMS_BENCH_CUDA(cudaEventRecord(stop, stream_));
    LMS_BENCH_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    LMS_BENCH_CUDA(cudaEventElapsedTime(&ms, start, stop));
    for (cudaEvent_t event : ended.events) {
      float at = 0;
      LMS_BENCH_CUDA(cudaEventElapsedTime(&at, start, event));
      figures->ended_us.push_back(static_cast<int64_t>(std::llround(at * 1000.0)));
    }
    LMS_BENCH_CUDA(cudaEventDestroy(start));
    LMS_BENCH_CUDA(cudaEventDestroy(stop));
    figures->step_ms = ms;
    figures->stats = step_stats(before, Caching::getDeviceStats(0), pool_before, pool_figures());
    return true;
  }

  // Every live storage read once more, after the last step: what paging did to any of them.
  // One at a time, as operators would, so that under a limit each may be paged in.
  void check_all() {
    for (auto& [id, live] : live_) {
      if (live.storage->nbytes() == 0) {
        continue;
      }
      OperatorWork job{-1, {}, {}};
      c10::lms::PinScope scope;
      scope.pin(*live.storage);
      job.checks.push_back(Access{const_cast<void*>(live.storage->data()),
                                   live.storage->nbytes(), id, live.version});
      launch(std::move(job), 0);
    }
    LMS_BENCH_CUDA(cudaStreamSynchronize(stream_));
  }

  void release() {
    live_.clear();
  }

  // Up to the last synchronisation.
  int64_t mismatches() { return device_.mismatches(); }
  std::string first_mismatch() { return device_.first_mismatch(); }
  const std::string& oom() const { return oom_; }
  int64_t oom_op() const { return oom_op_; }

 private:
  static std::string first_line(const char* text) {
    std::string line(text);
    return line.substr(0, line.find('\n'));
  }

  // The plan's moves before OP; a storage the step does not hold now is skipped. A page-in
  // LMS refused (no room yet: page-outs still copying) is asked for again before each
  // operator until its storage's use.
  void play_moves(const Op& op) {
    for (auto waiting = refused_ins_.begin(); waiting != refused_ins_.end();) {
      auto live = live_.find(*waiting);
      if (live == live_.end() || live->second.storage->lms() == nullptr ||
          live->second.storage->lms()->state() != c10::lms::State::kReclaimed) {
        waiting = refused_ins_.erase(waiting);  // freed, or paged in by now
      } else if (c10::lms::page_in_planned(*live->second.storage)) {
        moves_.ins_retried_started += 1;
        waiting = refused_ins_.erase(waiting);
      } else {
        ++waiting;
      }
    }
    auto asked = [&](const std::unordered_map<int64_t, std::vector<int64_t>>& moves,
                     bool page_out) {
      auto found = moves.find(op.id);
      if (found == moves.end()) {
        return;
      }
      for (int64_t id : found->second) {
        auto live = live_.find(id);
        if (live == live_.end()) {
          continue;
        }
        c10::StorageImpl& storage = *live->second.storage;
        if (page_out) {
          moves_.outs_asked += 1;
          moves_.outs_started += c10::lms::page_out_planned(storage) ? 1 : 0;
        } else {
          moves_.ins_asked += 1;
          if (c10::lms::page_in_planned(storage)) {
            moves_.ins_started += 1;
          } else if (storage.lms() != nullptr &&
                     storage.lms()->state() == c10::lms::State::kReclaimed) {
            refused_ins_.push_back(id);
          }
        }
      }
    };
    asked(plan_.out, true);
    asked(plan_.in, false);
  }

  void create(int64_t id, size_t bytes) {
    if (live_.count(id) != 0) {  // ids are never reused within a trace
      throw CheckFailed("storage " + std::to_string(id) + " is made again while it lives: " +
                        "the script's kept storages are wrong");
    }
    live_[id].storage = c10::make_intrusive<c10::StorageImpl>(
        c10::StorageImpl::use_byte_size_t(), c10::SymInt(static_cast<int64_t>(bytes)),
        Caching::get(), /*resizable=*/false);
    live_[id].version = 0;
  }

  Live& find(int64_t id, const Op& op) {
    auto found = live_.find(id);
    if (found == live_.end()) {
      throw CheckFailed("operator " + std::to_string(op.id) + " uses storage " +
                        std::to_string(id) + ", which is not live: the trace is inconsistent");
    }
    return found->second;
  }

  // An initial storage's first contents (a batch copied in, parameters loaded).
  void write_alone(int64_t id) {
    OperatorWork job{-1, {}, {}};
    Live& live = live_[id];
    c10::lms::PinScope scope;
    scope.pin(*live.storage);
    if (live.storage->nbytes() != 0) {
      job.writes.push_back(
          Access{live.storage->mutable_data(), live.storage->nbytes(), id, ++live.version});
    }
    launch(std::move(job), 0);
  }

  void run_op(const Op& op, int number, StepFigures* figures) {
    OperatorWork job{op.id, {}, {}};
    {
      c10::lms::PinScope scope;  // at::LmsPinGuard's scope in the operator's wrapper
      // What the operator makes, first: a storage it both makes and reads (a Python scalar
      // lifted to a tensor, aten.lift_fresh) must exist before it is pinned and read.
      std::vector<int64_t> written;
      for (const Alloc& alloc : op.allocs) {
        if (alloc.kept && live_.count(alloc.id) != 0 && number > 0) {
          scope.pin(*live_[alloc.id].storage);  // optimizer state from the first step
        } else {
          create(alloc.id, alloc.bytes);  // adopted by the scope: pinned until it closes
          if (std::find(op.reads.begin(), op.reads.end(), alloc.id) != op.reads.end()) {
            write_alone(alloc.id);  // its value, copied in from the host
          }
        }
        written.push_back(alloc.id);
      }
      for (int64_t id : op.reads) {
        scope.pin(*find(id, op).storage);
      }
      // An operator's new outputs are among its writes too (made above).
      for (int64_t id : op.writes) {
        if (std::find(written.begin(), written.end(), id) == written.end()) {
          scope.pin(*find(id, op).storage);
          written.push_back(id);
        }
      }
      // Reads first: data() pages a reclaimed storage in, as a kernel's const access does.
      for (int64_t id : op.reads) {
        Live& live = find(id, op);
        if (live.storage->nbytes() != 0) {
          job.checks.push_back(Access{const_cast<void*>(live.storage->data()),
                                       live.storage->nbytes(), id, live.version});
        }
      }
      for (int64_t id : written) {
        Live& live = find(id, op);
        if (live.storage->nbytes() != 0) {
          job.writes.push_back(Access{live.storage->mutable_data(), live.storage->nbytes(), id,
                                       live.version + 1});
        }
      }
      for (int64_t id : written) {
        live_[id].version += 1;
      }
      launch(std::move(job), op.duration_ns);
      DeviceStats now = Caching::getDeviceStats(0);
      figures->allocated.push_back(aggregate_current(now.allocated_bytes));
      figures->reserved.push_back(aggregate_current(now.reserved_bytes));
    }
    for (int64_t id : op.frees) {
      find(id, op);  // a free of a storage that is not live: the trace is inconsistent
      live_.erase(id);  // the last reference: its block goes back to the allocator
    }
  }

  void launch(OperatorWork job, double duration_ns) {
    LMS_BENCH_CUDA(device_.launch(stream_, std::move(job), duration_ns));
  }

  const Script& script_;
  MovePlan plan_;
  MoveCounts moves_;
  std::vector<int64_t> refused_ins_;  // planned page-ins to ask for again
  cudaStream_t stream_ = nullptr;
  std::unordered_map<int64_t, Live> live_;
  lms_replay::Device device_;
  std::string oom_;
  int64_t oom_op_ = -1;
};

// Exact integers: Json::value() writes doubles with fewer digits than a byte count needs.
void write_series(Json& json, const std::string& key, const std::vector<int64_t>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    text += (i == 0 ? "" : ",") + std::to_string(values[i]);
  }
  json.raw_field(key, text + "]");
}

int run(int argc, char** argv) {
  Args args(kProgram,
            "Replays a traced training step (an lmsforge replay script) through the real\n"
            "CUDA caching allocator and LMS (on lmsforge's simulated CUDA runtime, or on a\n"
            "GPU as lms_plan_replay); writes JSON.\n"
            "LMS and its settings come from PYTORCH_CUDA_ALLOC_CONF, as for a user.");
  args.option("script", "", "replay script to read (required)");
  args.option("out", "", "JSON file to write (required)");
  args.option("plan", "", "plan of moves to play from the second step on (optional)");
  args.option("record", "0",
              "1: mark a step boundary of LMS's recorded-order policy before each step");
  args.option("steps", "2",
              "steps to replay, each reported (lmsforge reports the median after the first)");
  if (!args.parse(argc, argv)) {
    return kExitOk;
  }
  if (args.get("script").empty() || args.get("out").empty()) {
    throw UsageError("--script and --out are required");
  }
  const int steps = static_cast<int>(parse_int(args.get("steps"), 1, 100, "steps"));
  Script script = read_script(args.get("script"));
  require_device(0);
  register_primary_context_query();
  // The settings a user's process reads from PYTORCH_CUDA_ALLOC_CONF, read as torch does.
  Caching::CUDAAllocatorConfig::instance();
  Caching::init(c10::cuda::device_count());
  c10::cuda::set_device(0);

  const bool mark_steps = parse_int(args.get("record"), 0, 1, "record") == 1;
  Replay replay(script, args.get("plan").empty() ? MovePlan() : read_plan(args.get("plan")));
  std::vector<StepFigures> done;
  bool completed = true;
  for (int number = 0; number < steps && completed; ++number) {
    StepFigures figures;
    completed = replay.step(number, &figures, mark_steps);
    if (completed) {
      done.push_back(std::move(figures));
    }
  }
  if (completed) {
    replay.check_all();
  }
  LMS_BENCH_CUDA(cudaDeviceSynchronize());
  size_t device_free = 0, device_total = 0;
  LMS_BENCH_CUDA(cudaMemGetInfo(&device_free, &device_total));

  Json json;
  json.begin_object();
  json.field("program", kProgram);
  json.field("schema", 1);
  json.field("simulated", lms_replay::Device::simulated());
  write_timing(json, lms_replay::Device::calibration());
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  json.field("alloc_conf", conf != nullptr ? conf : "");
  // How it was run besides the environment, so that a run can be made again (on a GPU:
  // bench/plan_replay_gpu.py).
  json.field("record", mark_steps);
  json.field("plan", args.get("plan"));
  json.field("lms_enabled", c10::cuda::lms::enabled());
  json.field("lms_limit_bytes", static_cast<long long>(c10::cuda::lms::current_limit(0)));
  json.field("device_memory_bytes", device_total);
  json.field("operators", script.ops.size());
  json.field("completed", completed);
  if (!completed) {
    json.field("oom", replay.oom());
    json.field("oom_op", static_cast<long long>(replay.oom_op()));
  }
  json.begin_array("steps");
  for (const StepFigures& figures : done) {
    json.begin_object();
    json.field("step_ms", figures.step_ms);
    json.begin_object("memory_stats");
    for (const auto& [key, value] : figures.stats) {
      json.field(key, static_cast<long long>(value));
    }
    json.end_object();
    json.end_object();
  }
  json.end_array();
  if (!done.empty()) {
    write_series(json, "allocated_after_op", done.back().allocated);
    write_series(json, "reserved_after_op", done.back().reserved);
    write_series(json, "ended_us_after_op", done.back().ended_us);
  }
  json.begin_object("planned_moves");
  json.field("page_outs_asked", static_cast<long long>(replay.moves().outs_asked));
  json.field("page_outs_started", static_cast<long long>(replay.moves().outs_started));
  json.field("page_ins_asked", static_cast<long long>(replay.moves().ins_asked));
  json.field("page_ins_started", static_cast<long long>(replay.moves().ins_started));
  json.field("page_ins_started_later",
             static_cast<long long>(replay.moves().ins_retried_started));
  json.end_object();
  c10::lms::RecorderCounters recorder = c10::cuda::lms::recorder_counters(0);
  json.begin_object("recorder");
  json.field("steps", static_cast<long long>(recorder.steps));
  json.field("steps_planned", static_cast<long long>(recorder.steps_planned));
  json.field("positions_played", static_cast<long long>(recorder.positions_played));
  json.field("divergences", static_cast<long long>(recorder.divergences));
  json.field("moves_asked", static_cast<long long>(recorder.moves_asked));
  json.field("moves_started", static_cast<long long>(recorder.moves_started));
  // Steps over the recorder's event cap: recorded no further, never planned.
  json.field("overlong_steps", static_cast<long long>(recorder.overlong_steps));
  json.end_object();
  json.field("data_checked", completed);
  json.field("mismatches", static_cast<long long>(replay.mismatches()));
  json.field("data_ok", replay.mismatches() == 0);
  json.end_object();
  json.write(args.get("out"));
  replay.release();
  if (replay.mismatches() != 0) {
    throw CheckFailed(std::to_string(replay.mismatches()) + " storage reads found wrong data; " +
                      "first: " + replay.first_mismatch());
  }
  return kExitOk;
}

} // namespace

int main(int argc, char** argv) {
  return lms_bench::run_program(kProgram, [&] { return run(argc, argv); });
}
