#!/usr/bin/env bash
# The TensorFlow GPU level of an lmsforge bundle in one command (docs/gpu.md):
#
#   ./run-gpu.sh RESULTS_DIR [--jobs N] [--build-dir DIR] [--quick] [--no-bench] [--build-only]
#
# Builds TensorFlow's LMS GPU test, gpu_lms_test, from this folder alone (no
# network, no CUDA toolkit: g++ 9 or newer and CMake 3.18 or newer) against the
# bundled libtensorflow_framework.so.2 of the tensorflow==2.14.1 wheel, runs it
# on this host's GPUs, and writes logs, the googletest JSON report and
# summary.json into RESULTS_DIR. TensorFlow loads the driver's libcuda.so.1 and
# the bundled CUDA 11.8 runtime (wheel/nvidia/cuda_runtime/lib) unless
# LD_LIBRARY_PATH names another libcudart.so.11.0. There are no TensorFlow
# benchmarks: --quick and --no-bench are accepted and change nothing.
#
# Exit codes:
#   0  every test passed
#   1  a test failed
#   2  bad usage
#   3  the build failed (RESULTS_DIR/build.log)
#   4  no CUDA device here (or a host the bundled x86_64 wheel cannot run on): nothing ran on a GPU
set -u -o pipefail

readonly EXIT_OK=0 EXIT_FAILED=1 EXIT_USAGE=2 EXIT_BUILD=3 EXIT_NO_CUDA=4
readonly PROGRAM=gpu_lms_test
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

usage() {
  sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
}

out="" jobs="" build_dir="" build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit $EXIT_OK ;;
    --jobs) [ $# -ge 2 ] || { echo "run-gpu.sh: --jobs needs a value" >&2; exit $EXIT_USAGE; }
            jobs=$2; shift ;;
    --build-dir) [ $# -ge 2 ] || { echo "run-gpu.sh: --build-dir needs a value" >&2; exit $EXIT_USAGE; }
            build_dir=$2; shift ;;
    --quick|--no-bench) ;;
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
. "$here/probe/gtest_counts.sh"

# summary.json: STATUS EXIT_CODE REASON.
finish() {
  local status=$1 code=$2 reason=${3//[\"\\]/\'} reports=""
  [ -f "$out/$PROGRAM.json" ] && reports="\"$PROGRAM.json\""
  cat > "$out/summary.json" <<JSON
{
  "status": "$status",
  "exit_code": $code,
  "reason": "$reason",
  "seconds": $(( $(date +%s) - started )),
  "framework": "tensorflow",
  "bundle_manifest": "MANIFEST.json",
  "test_reports": [$reports],
  "benchmarks": {}
}
JSON
  say "$status: $reason (exit $code; results in $out)"
  exit "$code"
}

cp "$here/MANIFEST.json" "$out/MANIFEST.json" 2>/dev/null

# ---- host --------------------------------------------------------------------
arch=$(uname -m)
if [ "$arch" != x86_64 ]; then
  finish skipped $EXIT_NO_CUDA "the bundled tensorflow==2.14.1 wheel is for x86_64; this host is $arch"
fi
cxx=${CXX:-g++}
command -v "$cxx" >/dev/null 2>&1 || finish failed $EXIT_BUILD "$cxx not found (g++ 9 or newer is needed)"
command -v cmake >/dev/null 2>&1 || finish failed $EXIT_BUILD "cmake not found (3.18 or newer is needed)"
generator="Unix Makefiles"
command -v ninja >/dev/null 2>&1 && generator=Ninja
say "compiler $("$cxx" --version | head -1); $(cmake --version | head -1); $generator; $jobs jobs"

# ---- build -------------------------------------------------------------------
say "building $PROGRAM in $build_dir (log: $out/build.log)"
{
  CXX=$cxx cmake -G "$generator" -S "$here" -B "$build_dir" &&
  cmake --build "$build_dir" --parallel "$jobs" --target $PROGRAM lms_tf_device_probe
} > "$out/build.log" 2>&1 || finish failed $EXIT_BUILD "the build failed: $(grep -m1 -E 'error|Error' "$out/build.log")"
bin="$build_dir/bin"
say "built $PROGRAM and lms_tf_device_probe"
[ "$build_only" = 1 ] && finish built $EXIT_OK "built only (--build-only)"

# ---- device ------------------------------------------------------------------
"$bin/lms_tf_device_probe" > "$out/device.txt" 2>&1
if [ $? -ne 0 ]; then
  finish skipped $EXIT_NO_CUDA "$(head -1 "$out/device.txt")"
fi
say "devices: $(tr '\n' ';' < "$out/device.txt")"

# ---- test --------------------------------------------------------------------
say "running $PROGRAM"
"$bin/$PROGRAM" --gtest_output="json:$out/$PROGRAM.json" > "$out/$PROGRAM.log" 2>&1
code=$?
summary=$(gtest_counts "$out/$PROGRAM.log")
if [ "$code" -ne 0 ] || [ ! -f "$out/$PROGRAM.json" ]; then
  say "$PROGRAM FAILED (exit $code): $summary"
  finish failed $EXIT_FAILED "not passed: $PROGRAM"
fi
# A test skips itself when TensorFlow finds no GPU; after the driver listed some, that is a
# failure (a CUDA 11 runtime the driver refuses, say), never a pass.
if grep -qx "no CUDA device" "$out/$PROGRAM.log"; then
  say "$PROGRAM: $summary"
  finish failed $EXIT_FAILED "TensorFlow found no CUDA device although the driver lists some (see $PROGRAM.log)"
fi
say "$PROGRAM: $summary"
finish passed $EXIT_OK "all tests passed"
