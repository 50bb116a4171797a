# Sourced by run-gpu.sh. gtest_counts LOG prints what a googletest program's
# summary says, as "N passed, N failed, N skipped", or that there is no
# summary (the program ended before writing one).
gtest_counts() {
  local log=$1 passed failed skipped
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9][0-9]*\) tests\{0,1\}\.$/\1/p' "$log" | tail -n 1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9][0-9]*\) tests\{0,1\}, listed below:$/\1/p' "$log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9][0-9]*\) tests\{0,1\}, listed below:$/\1/p' "$log" | tail -n 1)
  if [ -z "$passed$failed$skipped" ]; then
    echo "no test summary (the program ended early; see $log)"
    return
  fi
  echo "${passed:-0} passed, ${failed:-0} failed, ${skipped:-0} skipped"
}
