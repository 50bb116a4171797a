#!/usr/bin/env bash
# The GPU level of an lmsforge bundle in one command (docs/gpu.md):
#
#   ./run-gpu.sh RESULTS_DIR [--jobs N] [--build-dir DIR] [--quick] [--no-bench] [--build-only]
#                [--replays MODELS_DIR]
#
# Builds c10, c10_cuda, the LMS googletest programs and the benchmarks from
# this folder alone (no network), runs lms_core_tests and lms_cuda_tests, then
# the copy-engine and oversubscription benchmarks, and writes logs, googletest
# JSON reports, benchmark JSON + PNG and summary.json into RESULTS_DIR. Where
# python3 has a CUDA torch, bench/peers.py then runs save_on_cpu and
# checkpoint on the oversubscription shapes beside LMS (peers.json + PNG), and
# bench/planner_gpu_check.py checks lmsforge plan's predicted peaks
# (planner-gpu.json). With --replays, the model benchmarks' simulated replays
# (core-sim's models/ folder) run again on this GPU (bench/plan_replay_gpu.py,
# plan-replay-gpu.json; v2.x series).
#
# Exit codes:
#   0  every test passed and every benchmark's data check passed
#   1  a test failed, or a benchmark found wrong data or failed
#   2  bad usage
#   3  the build failed (RESULTS_DIR/build.log)
#   4  no CUDA toolkit or no CUDA device here: nothing ran on a GPU
set -u -o pipefail

readonly EXIT_OK=0 EXIT_FAILED=1 EXIT_USAGE=2 EXIT_BUILD=3 EXIT_NO_CUDA=4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  sed -n '2,/^[^#]/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
}

out="" jobs="" build_dir="" quick=0 bench=1 build_only=0 replays=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit $EXIT_OK ;;
    --jobs) [ $# -ge 2 ] || { echo "run-gpu.sh: --jobs needs a value" >&2; exit $EXIT_USAGE; }
            jobs=$2; shift ;;
    --build-dir) [ $# -ge 2 ] || { echo "run-gpu.sh: --build-dir needs a value" >&2; exit $EXIT_USAGE; }
            build_dir=$2; shift ;;
    --quick) quick=1 ;;
    --replays) [ $# -ge 2 ] || { echo "run-gpu.sh: --replays needs the model benchmarks' folder" >&2; exit $EXIT_USAGE; }
            [ -d "$2" ] || { echo "run-gpu.sh: --replays $2: no such folder (core-sim writes it: <cache>/builds/pytorch/TAG/verify/models)" >&2; exit $EXIT_USAGE; }
            replays=$(cd "$2" && pwd); shift ;;
    --no-bench) bench=0 ;;
    --build-only) build_only=1 ;;
    -*) echo "run-gpu.sh: unknown option $1 (see --help)" >&2; exit $EXIT_USAGE ;;
    *) [ -z "$out" ] || { echo "run-gpu.sh: one RESULTS_DIR only" >&2; exit $EXIT_USAGE; }
       out=$1 ;;
  esac
  shift
done
if [ -z "$out" ]; then
  echo "run-gpu.sh: the results folder is missing: run-gpu.sh RESULTS_DIR (see --help)" >&2
  exit $EXIT_USAGE
fi
case "$jobs" in
  "") jobs=$( (nproc || echo 2) 2>/dev/null) ;;
  *[!0-9]*|0) echo "run-gpu.sh: --jobs needs a positive integer, got '$jobs'" >&2; exit $EXIT_USAGE ;;
esac
mkdir -p "$out" || exit $EXIT_USAGE
out=$(cd "$out" && pwd)
build_dir=${build_dir:-$here/build}
log="$out/run-gpu.log"
: > "$log"
started=$(date +%s)

say() { echo "run-gpu: $*" | tee -a "$log"; }
# shellcheck source=bench/gtest_counts.sh
. "$here/bench/gtest_counts.sh"

# summary.json: STATUS EXIT_CODE REASON, plus what the steps left behind.
finish() {
  local status=$1 code=$2 reason=${3//[\"\\]/\'}
  local tests_json=""
  for name in lms_core_tests lms_cuda_tests; do
    [ -f "$out/$name.json" ] && tests_json="$tests_json\"$name.json\", "
  done
  cat > "$out/summary.json" <<JSON
{
  "status": "$status",
  "exit_code": $code,
  "reason": "$reason",
  "seconds": $(( $(date +%s) - started )),
  "bundle_manifest": "MANIFEST.json",
  "test_reports": [${tests_json%, }],
  "benchmarks": {"copy_engine": "$( [ -f "$out/copy-engine.json" ] && echo copy-engine.json )",
                 "oversubscription": "$( [ -f "$out/oversubscription.json" ] && echo oversubscription.json )",
                 "peers": "$( [ -f "$out/peers.json" ] && echo peers.json )",
                 "planner": "$( [ -f "$out/planner-gpu.json" ] && echo planner-gpu.json )",
                 "plan_replays": "$( [ -f "$out/plan-replay-gpu.json" ] && echo plan-replay-gpu.json )"}
}
JSON
  say "$status: $reason (exit $code; results in $out)"
  exit "$code"
}

cp "$here/MANIFEST.json" "$out/MANIFEST.json" 2>/dev/null

# ---- toolchain -------------------------------------------------------------
cuda_home=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
nvcc=""
if [ -x "$cuda_home/bin/nvcc" ]; then
  nvcc="$cuda_home/bin/nvcc"
elif command -v nvcc >/dev/null 2>&1; then
  nvcc=$(command -v nvcc)
  cuda_home=$(cd "$(dirname "$nvcc")/.." && pwd)
fi
if [ -z "$nvcc" ] || [ ! -f "$cuda_home/include/cuda_runtime_api.h" ]; then
  finish skipped $EXIT_NO_CUDA "no CUDA toolkit (no nvcc in CUDA_HOME=$cuda_home or on PATH)"
fi
command -v cmake >/dev/null 2>&1 || finish failed $EXIT_BUILD "cmake not found (3.18 or newer is needed)"
generator="Unix Makefiles"
command -v ninja >/dev/null 2>&1 && generator=Ninja
say "CUDA toolkit $cuda_home ($("$nvcc" --version | tail -1)); $generator; $jobs jobs"

arch_args=()
if command -v nvidia-smi >/dev/null 2>&1; then
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
  case "$cap" in
    ''|*[!0-9]*) ;;
    *) arch_args=("-DCMAKE_CUDA_ARCHITECTURES=$cap") ;;
  esac
fi

# ---- build -----------------------------------------------------------------
cpuinfo_lib=$(ls "$here"/deps/cpuinfo/lib/libcpuinfo.so* | head -1)
# lmsforge plan's replay on this GPU (bench/plan_replay_gpu.py) follows the 2.x allocator API.
plan_target=()
[ -f "$here/tree/c10/core/CachingDeviceAllocator.h" ] && plan_target=(lms_plan_replay)
say "building in $build_dir (log: $out/build.log)"
{
  cmake -G "$generator" -S "$here/bench" -B "$build_dir" \
    -DCMAKE_BUILD_TYPE=Release \
    -DTORCH_SRC="$here/tree" \
    -DLMSFORGE_C10_DIR="$here/lmsforge/verify/pytorch_c10" \
    -DNVML_INCLUDE_DIR="$here/deps/nvml/include" \
    -DGTEST_SOURCE_DIR="$here/deps/googletest" \
    -DCPUINFO_INCLUDE_DIR="$here/deps/cpuinfo/include" \
    -DCPUINFO_LIBRARY="$cpuinfo_lib" \
    -DFMT_INCLUDE_DIR="$here/deps/fmt/include" \
    -DCUDAToolkit_ROOT="$cuda_home" \
    -DCMAKE_CUDA_COMPILER="$nvcc" \
    ${arch_args[@]+"${arch_args[@]}"} &&
  cmake --build "$build_dir" --parallel "$jobs" --target \
    lms_core_tests lms_cuda_tests lms_bench_copy lms_bench_oversub lms_device_probe \
    ${plan_target[@]+"${plan_target[@]}"}
} > "$out/build.log" 2>&1 || finish failed $EXIT_BUILD "the build failed: $(grep -m1 -E 'error|Error' "$out/build.log")"
bin="$build_dir/bin"
say "built c10, c10_cuda, lms_core_tests, lms_cuda_tests and the benchmarks"
[ "$build_only" = 1 ] && finish built $EXIT_OK "built only (--build-only)"

# ---- device ----------------------------------------------------------------
"$bin/lms_device_probe" > "$out/device.txt" 2>&1
probe=$?
if [ "$probe" -ne 0 ]; then
  finish skipped $EXIT_NO_CUDA "$(head -1 "$out/device.txt")"
fi
say "devices: $(tr '\n' ';' < "$out/device.txt")"

# ---- tests -----------------------------------------------------------------
failed=()
for name in lms_core_tests lms_cuda_tests; do
  say "running $name"
  "$bin/$name" --gtest_output="json:$out/$name.json" > "$out/$name.log" 2>&1
  code=$?
  summary=$(gtest_counts "$out/$name.log")
  if [ "$code" -ne 0 ] || [ ! -f "$out/$name.json" ]; then
    failed+=("$name")
    say "$name FAILED (exit $code): $summary"
  else
    say "$name: $summary"
  fi
done

# ---- benchmarks ------------------------------------------------------------
if [ "$bench" = 1 ]; then
  python=$(command -v python3 || true)
  for benchmark in copy oversub; do
    extra=()
    if [ "$quick" = 1 ]; then
      case $benchmark in
        copy) extra=(--sizes 4K,1M,16M,256M --repeats 5 --warmup 1) ;;
        oversub) extra=(--factors 1,2 --limit 512M --steps 3 --warmup 1) ;;
      esac
    fi
    say "benchmark $benchmark ${extra[*]}"
    if [ -n "$python" ]; then
      "$python" "$here/bench/lmsbench.py" "$benchmark" --bin-dir "$bin" --out "$out" -- ${extra[@]+"${extra[@]}"} \
        2>&1 | tee -a "$log"
      code=$?
    else
      name=$([ $benchmark = copy ] && echo copy-engine || echo oversubscription)
      say "python3 not found: no plots; JSON only"
      "$bin/lms_bench_$benchmark" --out "$out/$name.json" ${extra[@]+"${extra[@]}"} > "$out/$name.log" 2>&1
      code=$?
    fi
    [ "$code" -eq 0 ] || failed+=("benchmark $benchmark (exit $code)")
  done
  # What users pick instead of LMS, on the same shapes, with this host's own torch.
  if [ -z "$python" ]; then
    say "peers: skipped: python3 not found"
  elif ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
         >/dev/null 2>&1; then
    say "peers: skipped: python3 here has no torch that sees a CUDA device"
  elif [ ! -f "$out/oversubscription.json" ]; then
    say "peers: skipped: no oversubscription.json to take the shapes from"
  else
    say "peers: save_on_cpu and checkpoint on the oversubscription shapes"
    "$python" "$here/bench/peers.py" --out "$out" --lms-result "$out/oversubscription.json" \
      2>&1 | tee -a "$log"
    code=$?
    [ "$code" -eq 0 ] || failed+=("peers (exit $code)")
  fi
  # The planner's predicted peaks (lmsforge plan's trace) against this GPU's, stock torch.
  if [ -z "$python" ] || ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' \
         >/dev/null 2>&1; then
    say "planner: skipped: python3 here has no torch that sees a CUDA device"
  elif [ "$quick" = 1 ]; then
    say "planner: skipped with --quick (full-size models, about a minute)"
  else
    say "planner: its predicted peaks against this GPU's (bench/planner_gpu_check.py --fit)"
    "$python" "$here/bench/planner_gpu_check.py" \
      --fit --steps 2 --out "$out/planner-gpu.json" 2>&1 | tee -a "$log"
    code=$?
    [ "$code" -eq 0 ] || failed+=("planner (exit $code)")
  fi
fi

# lmsforge plan's simulated replays on this GPU: the simulator's step times against the device's.
if [ -n "$replays" ]; then
  if [ ${#plan_target[@]} -eq 0 ]; then
    say "plan replays: skipped: the replay follows the 2.x allocator API, which this tree lacks"
  elif [ -z "$(command -v python3 || true)" ]; then
    failed+=("plan replays (python3 not found)")
  else
    say "plan replays: the model benchmarks' replays from $replays on this GPU"
    python3 "$here/bench/plan_replay_gpu.py" --runs "$replays" --program "$bin/lms_plan_replay" \
      --out "$out/plan-replay-gpu.json" 2>&1 | tee -a "$log"
    code=$?
    [ "$code" -eq 0 ] || failed+=("plan replays (exit $code)")
  fi
fi

if [ ${#failed[@]} -gt 0 ]; then
  finish failed $EXIT_FAILED "not passed: ${failed[*]}"
fi
finish passed $EXIT_OK "all tests passed; benchmark data checked"
