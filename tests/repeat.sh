#!/usr/bin/env bash
# Run one test again and again until it fails or the time is up (issue 39: the scheduled
# fleet DAG run that failed once). Each run's output is kept in .cache/logs/repeat/.
# Usage: tests/repeat.sh TEST_ID [SECONDS=3600]
set -uo pipefail
test_id=${1:?usage: tests/repeat.sh TEST_ID [SECONDS]}
end=$(( $(date +%s) + ${2:-3600} ))
logs=.cache/logs/repeat
mkdir -p "$logs"
i=0
while [ "$(date +%s)" -lt "$end" ]; do
  i=$((i + 1))
  .venv/bin/python -m pytest -q -p no:cacheprovider "$test_id" --durations=1 >"$logs/run-$i.log" 2>&1
  rc=$?
  echo "run $i: exit $rc, $(grep -o '[0-9.]*s call' "$logs/run-$i.log" | head -1) $(date +%T)"
  [ "$rc" -ne 0 ] && { echo "failed: $logs/run-$i.log"; exit "$rc"; }
done
echo "$i runs, none failed"
