#!/usr/bin/env bash
# Run one test again and again until it fails or RUNS runs have passed (issue 39: the
# scheduled fleet DAG run that failed once). COPIES runs go at once, each loading the
# machine for the others, as the other lane does in the suite. Each run's output is kept
# in .cache/logs/repeat/run-N.log; a failed run also keeps its pytest temp directory
# (run-N/, with the Airflow home and every task's log), a passed one does not.
# One line per run: exit code, seconds, and the calls a task retried (the task SDK logs
# "Starting call to ..." before each retry of a request to the execution API).
# Usage: tests/repeat.sh TEST_ID [RUNS=100] [COPIES=1]
set -uo pipefail
test_id=${1:?usage: tests/repeat.sh TEST_ID [RUNS] [COPIES]}
runs=${2:-100}
copies=${3:-1}
logs=.cache/logs/repeat
mkdir -p "$logs"
rm -f "$logs/FAILED"

repeat_copy() {  # runs copy, copy + copies, ... while none has failed
  local i rc started
  for ((i = $1; i <= runs; i += copies)); do
    [ -e "$logs/FAILED" ] && return
    started=$(date +%s)
    .venv/bin/python -m pytest -q -p no:cacheprovider "$test_id" \
      --basetemp="$logs/run-$i" >"$logs/run-$i.log" 2>&1
    rc=$?
    echo "run $i: exit $rc, $(( $(date +%s) - started )) s," \
      "$(grep -rl 'Starting call to' "$logs/run-$i" 2>/dev/null | wc -l) log(s) with retried calls $(date +%T)"
    if [ "$rc" -ne 0 ]; then
      echo "run $i failed: $logs/run-$i.log, $logs/run-$i/" | tee "$logs/FAILED"
      return
    fi
    rm -rf "${logs:?}/run-$i"
  done
}

for ((copy = 1; copy <= copies; copy++)); do
  repeat_copy "$copy" &
  sleep 15  # their start-ups apart, as the lanes' are
done
wait
if [ -e "$logs/FAILED" ]; then exit 1; fi
echo "$runs runs of $test_id, $copies at once: none failed"
