#!/usr/bin/env bash
# The whole suite in two pytest processes at once (what `make test` runs).
#
# Lane A holds the tests that mostly wait: Airflow DAG runs (task start-ups, sshd, an
# api-server, a killed task's heartbeat, a scheduler's fleet run), the standalone Spark
# cluster (master and worker JVMs starting), SFTP snapshots, the S3 server's tests (a
# fleet's nights on the bucket), and a Spark module with its own warehouse (incremental
# loads), the scheduler killed mid-run, the maintenance racing loads, a night on Spark in
# a bucket, the DLedger and cluster pipelines and the GX module, which balance the lanes'
# lengths (at 2979172: lane B 30:24, lane A 30:42; docs/testing.md). Lane B, everything
# else, fills the two cores meanwhile. Each lane has its own temp dir, Airflow home and
# Spark session; ports are reserved (tests/endpoints.free_port) and the stores are built before
# either lane starts. Lane A's output is printed after lane B's. Exit status: the worse of
# the two (pytest's 5, "no tests collected", counts as success).
set -uo pipefail
PY=${1:?usage: tests/lanes.sh PYTHON}
LANE_A=(tests/test_dag.py tests/test_fleet_dag.py tests/test_cluster.py
        tests/test_snapshot.py tests/test_load_incremental.py
        tests/test_driver_rows.py tests/test_rocksdb_pipeline.py
        tests/test_compaction_pipeline.py tests/test_controller_pipeline.py
        tests/test_load_rewrites.py tests/test_changing_pipeline.py
        tests/test_s3_warehouse.py tests/test_leases.py
        tests/test_s3_server.py tests/test_scheduler_restart.py
        tests/test_maintenance_races.py tests/test_s3_spark.py
        tests/test_dledger_pipeline.py tests/test_cluster_pipeline.py
        tests/test_expectations.py)
# Memory: every Spark driver JVM of the suite gets a 2 GiB heap (RMQ_SPARK_DRIVER_MEMORY;
# the fleet DAG gives its tasks' JVMs 1.5 GiB). At the worst moment lane A has its session
# and the fleet DAG's two task JVMs, lane B its session and a test's own Spark process or
# two: well under 24 GiB. With the default 4g, six JVMs near 4 GiB each once got one
# killed by the kernel's OOM killer on 24 GiB (docs/fleet.md).
export RMQ_SPARK_DRIVER_MEMORY=${RMQ_SPARK_DRIVER_MEMORY:-2g}
# CPU: the suite's Spark JVMs live minutes on small data, where the JIT's C2 compiler costs
# more than it saves (tests/test_contracts.py: 90 CPU-s with it, 50 without; docs/configuration.md).
export RMQ_SPARK_JAVA_OPTIONS=${RMQ_SPARK_JAVA_OPTIONS--XX:TieredStopAtLevel=1 -XX:+UseSerialGC}
IGNORE=()
for file in "${LANE_A[@]}"; do IGNORE+=("--ignore=$file"); done
mkdir -p .cache/logs
log=.cache/logs/test-lane-a.log
base=$(mktemp -d /tmp/rmq-test-lanes-XXXXXX)
trap 'rm -rf "$base"' EXIT

"$PY" -m pytest "${LANE_A[@]}" --basetemp="$base/a" --durations=15 >"$log" 2>&1 &
lane_a=$!
"$PY" -m pytest "${IGNORE[@]}" --basetemp="$base/b" --durations=25
status_b=$?
wait "$lane_a"
status_a=$?
echo "==================== lane A (${LANE_A[*]}), log: $log"
cat "$log"
ok() { [ "$1" -eq 0 ] || [ "$1" -eq 5 ]; }
if ok "$status_a" && ok "$status_b"; then exit 0; fi
echo "test lanes failed: lane A exit $status_a, lane B exit $status_b"
exit $(( status_b != 0 && status_b != 5 ? status_b : status_a ))
