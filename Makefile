# The two commands a newcomer needs are `make run` and `make test` (see README.md).
# Every target installs what it needs first; stamps make re-runs cheap.

PYTHON      ?= python3.11
VENV        := .venv
PY          := $(VENV)/bin/python
UV          := $(VENV)/bin/uv
UV_VERSION  := 0.13.9
INSTALLED   := $(VENV)/.installed
PYTEST_ARGS ?=
STORE_CACHE ?= $(or $(RMQ_STORE_CACHE),.cache/stores)
# The store `make run` reads: RMQ_STORE if set, else the embedded default built by the
# real-broker harness (5.x, clean shutdown).
RUN_STORE   ?= $(or $(RMQ_STORE),$(STORE_CACHE)/v5-clean/store)
# Broker name and logical date of `make run`: one DAG run (and snapshot) per UTC day, so a
# second run on the same day shows the idempotent skip.
RUN_BROKER  ?= $(or $(RMQ_BROKER),broker-a)
RUN_DATE    ?= $(shell date -u +%F)

# Recipes run in bash with pipefail: a failing DAG run fails `make run` through its filter.
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c

.PHONY: setup run run-s3 test test-setup lint lock jars stores default-store clean check-tools browser sshd s3 fuzz sql-server beeline

## setup: virtualenv with the locked Python stack + Delta jars from Maven Central
setup: $(INSTALLED) jars

check-tools:
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found"; exit 1; }
	@command -v java >/dev/null || { echo "error: java (17+) not found"; exit 1; }
	@command -v mvn >/dev/null || { echo "error: mvn (Maven) not found"; exit 1; }

# `uv pip sync` makes the environment equal to the lock: anything else (for example a
# stray pyspark-client shadowing the real pyspark) is removed. uv writes no bytecode unless
# asked, and where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) Python
# never caches it either: every process compiled what it imported, a task's or a CLI
# command's check 7 CPU-s more (GX and Airflow alone ~9,000 files; docs/testing.md).
$(INSTALLED): requirements.lock pyproject.toml | check-tools
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q uv==$(UV_VERSION)
	$(UV) pip sync -q --compile-bytecode --python $(PY) requirements.lock
	$(UV) pip install -q --compile-bytecode --python $(PY) --no-deps -e .
	touch $@

jars: $(INSTALLED)
	$(PY) -m jobs.lakehouse.jars >/dev/null

## stores: real RocketMQ broker stores + ground truth in .cache/stores (built once, three at
## a time): the four main variants, v5-growing (hot snapshots of one running broker),
## v5-features (every optional 5.x store feature) and v5-cluster (two masters and a slave);
## `make test` builds them first
stores: $(INSTALLED)
	$(PY) tests/broker_harness/stores.py --variants all

# Only the embedded default variant, for `make run`.
default-store: $(INSTALLED)
	@if [ -z "$(RMQ_STORE)" ]; then $(PY) tests/broker_harness/stores.py --variants v5-clean; fi

# Airflow for `make run`: its own home and SQLite DB under .cache/airflow, dags/ as the DAG
# folder, the broker given as the rmq_brokers Variable (AIRFLOW_VAR_*), no example DAGs.
# With RMQ_WAREHOUSE set, the home is <warehouse>/_airflow: the DAG's Assets are named
# rmq.<table> with the warehouse's file URIs, and an Airflow DB that holds them for another
# warehouse refuses the tasks' outlets (AirflowInactiveAssetInInletOrOutletException) under
# `dags test`, which has no scheduler to retire the old URIs.
# A warehouse in a bucket (s3://...) keeps its Airflow home in .cache/airflow-s3.
AIRFLOW_HOME_DIR ?= $(if $(filter s3://%,$(RMQ_WAREHOUSE)),$(CURDIR)/.cache/airflow-s3,$(if \
	$(RMQ_WAREHOUSE),$(abspath $(RMQ_WAREHOUSE))/_airflow,$(CURDIR)/.cache/airflow))
AIRFLOW_DB  := $(AIRFLOW_HOME_DIR)/airflow.db
# RMQ_SPARK_SHARED_SESSION: `dags test` runs every task in this one process, so its Spark
# tasks share one session (under a scheduler each task ends its own JVM).
AIRFLOW_ENV := AIRFLOW_HOME=$(AIRFLOW_HOME_DIR) AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False RMQ_SPARK_SHARED_SESSION=1 \
	AIRFLOW_VAR_RMQ_BROKERS='[{"name": "$(RUN_BROKER)", "store": "$(abspath $(RUN_STORE))"}]'
AIRFLOW     := $(AIRFLOW_ENV) $(VENV)/bin/airflow

## run: set up, then run the pipeline end to end on the embedded default store: the Airflow
## DAG rmq_nightly (`airflow dags test`, SQLite metadata DB, local Spark) snapshots the store,
## loads it into the Delta tables (.cache/warehouse), checks it and records the alert; then
## the run's summary. The full Airflow log is in .cache/logs/rmq_nightly-<date>.log.
run: setup default-store $(AIRFLOW_DB)
	@mkdir -p .cache/logs
	@echo "airflow dags test rmq_nightly $(RUN_DATE): broker $(RUN_BROKER) at $(RUN_STORE)"
	$(AIRFLOW) dags test rmq_nightly $(RUN_DATE) 2>&1 | tee .cache/logs/rmq_nightly-$(RUN_DATE).log \
		| grep --line-buffered -E '\[DAG TEST\] (starting|end) task|\[jobs\.|\[notifiers\]|\[rmq_nightly\]|\[error|DagRun Finished' \
		| sed -u -E 's/^[0-9-]+T([0-9:]+)\.[0-9]+Z \[([a-z]+) *\] /\1 \2 /; s/ +\[[A-Za-z_.]+\] loc=.*$$//; s/ map_index=-1//'
	$(AIRFLOW_ENV) $(PY) -m jobs summary --snapshot-id $(RUN_DATE)T0000Z --broker $(RUN_BROKER)

## run-s3: `make run` with the warehouse and the snapshots in a bucket of the local S3 server:
## versitygw on 127.0.0.1:$(S3_PORT) serving .cache/s3 (bucket rmq), started and stopped here;
## the tables at s3://rmq/warehouse, the snapshots at s3://rmq/snapshots, the keys and
## endpoint in the AWS_* environment (docs/object-storage.md)
S3_PORT ?= 7070
run-s3: setup s3 default-store
	@mkdir -p .cache/logs
	@rm -f .cache/logs/s3-server.env
	@$(PY) tests/s3_server.py .cache/s3 $(S3_PORT) rmq > .cache/logs/s3-server.env \
		2>.cache/logs/s3-server.log & server=$$!; trap "kill $$server" EXIT; \
	for _ in $$(seq 100); do grep -q AWS_ALLOW_HTTP .cache/logs/s3-server.env 2>/dev/null && break; \
		sleep 0.1; done; \
	set -a; . .cache/logs/s3-server.env; set +a; \
	echo "S3 server at $$AWS_ENDPOINT_URL (data in .cache/s3); warehouse s3://rmq/warehouse," \
		"snapshots s3://rmq/snapshots"; \
	$(MAKE) --no-print-directory run RMQ_WAREHOUSE=s3://rmq/warehouse \
		RMQ_SNAPSHOT_ROOT=s3://rmq/snapshots

$(AIRFLOW_DB): $(INSTALLED)
	@mkdir -p $(AIRFLOW_HOME_DIR)
	$(AIRFLOW) db migrate >/dev/null
	$(AIRFLOW_ENV) $(PY) -c 'from jobs.pipeline_config import load_config; c = load_config(); \
		print(c.spark_pool, c.spark_pool_slots, "Spark-applications-at-once")' \
		| xargs env $(AIRFLOW) pools set >/dev/null

## sql-server: serve the warehouse's tables to JDBC clients (BI tools) with the Spark Thrift
## Server until Ctrl-C: jdbc:hive2://127.0.0.1:$(SQL_PORT)/rmq. `make beeline` connects to it.
SQL_PORT ?= 10000
PYSPARK_JARS = $(shell $(PY) -c 'import pyspark, pathlib; print(pathlib.Path(pyspark.__file__).parent / "jars")')
sql-server: setup
	$(PY) -m jobs sql-server --port $(SQL_PORT)

## beeline: Hive's Beeline (in pyspark's jars), connected to `make sql-server`
beeline: setup
	java -cp "$(PYSPARK_JARS)/*" org.apache.hive.beeline.BeeLine \
		-u jdbc:hive2://127.0.0.1:$(SQL_PORT)/rmq

## browser: Debian's Chromium for the tests that open the HTML reports (playwright drives
## it; nothing downloads a browser of its own). Installs only when missing (needs root).
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get install -y -qq chromium >/dev/null 2>&1 || \
			{ apt-get update -qq && apt-get install -y -qq chromium; }; \
		else echo "error: $(CHROMIUM) missing: apt-get install chromium (as root)"; exit 1; fi; }

## sshd: Debian's OpenSSH server for the SFTP snapshot tests (tests/sshd.py starts it on a
## loopback port with its own config). Installs only when missing (needs root).
SSHD ?= /usr/sbin/sshd
sshd:
	@test -x $(SSHD) || { \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get install -y -qq openssh-server >/dev/null 2>&1 || \
			{ apt-get update -qq && apt-get install -y -qq openssh-server; }; \
		else echo "error: $(SSHD) missing: apt-get install openssh-server (as root)"; exit 1; fi; }

## s3: the S3-compatible server of the tests and of `make run-s3` (tests/s3_server.py):
## versitygw (Apache-2.0, POSIX backend), built from the Go module proxy (~1.5 min once).
VERSITYGW_VERSION := v1.8.0
VERSITYGW   := .cache/bin/versitygw-$(VERSITYGW_VERSION)
s3: $(VERSITYGW)
$(VERSITYGW):
	@command -v go >/dev/null || { echo "error: go (1.26+) not found"; exit 1; }
	mkdir -p .cache/bin/go-$(VERSITYGW_VERSION)
	GOBIN=$(CURDIR)/.cache/bin/go-$(VERSITYGW_VERSION) GOFLAGS=-mod=mod \
		go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)
	mv .cache/bin/go-$(VERSITYGW_VERSION)/versitygw $@
	rmdir .cache/bin/go-$(VERSITYGW_VERSION)

## test: set up, then run the whole test suite (two pytest processes at once, see
## tests/lanes.sh); with PYTEST_ARGS, one pytest run with those arguments instead
# pytest exits 5 when it collects no tests; that alone must not fail CI.
# The S3 server's Go build (200 CPU-s cold) and the broker harness's Maven build (45 s
# cold, mostly downloads) run beside the Python install and the apt packages (mostly
# downloads too) rather than before or beside the CPU-bound broker stores; the Python and
# apt steps stay one after another (apt-get locks).
test:
	$(MAKE) --no-print-directory -j2 s3 test-setup
	$(PY) -m compileall -q -j 2 jobs rmqlib dags tests bench >/dev/null
ifeq ($(strip $(PYTEST_ARGS)),)
	bash tests/lanes.sh $(PY)
else
	$(PY) -m pytest $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests"; exit 0; fi; exit $$status
endif

# Two Maven processes never share ~/.m2 at once (Maven 3.8 does not lock it): the Delta
# jars (`setup`'s second half) are fetched after the harness's build.
test-setup: check-tools
	mkdir -p .cache/logs
	$(PYTHON) tests/broker_harness/stores.py --build-only >.cache/logs/harness-build.log 2>&1 & \
	build=$$!; $(MAKE) --no-print-directory $(INSTALLED) && \
	$(MAKE) --no-print-directory browser && $(MAKE) --no-print-directory sshd; status=$$?; \
	wait $$build || { cat .cache/logs/harness-build.log; exit 1; }; exit $$status
	$(MAKE) --no-print-directory setup
	$(MAKE) --no-print-directory stores

## fuzz: coverage-guided fuzzing (atheris) of every rmqlib decoder, FUZZ_SECONDS per target,
## seeded from the real-broker stores; finds are kept in tests/fuzz/regressions/ (commit them:
## the test suite replays them)
FUZZ_SECONDS ?= 300
fuzz: setup stores
	$(PY) tests/fuzz/run.py all --seconds $(FUZZ_SECONDS)

lint: $(INSTALLED)
	$(VENV)/bin/ruff check .

## lock: re-resolve requirements.lock from pyproject.toml (run after changing dependencies)
lock: $(INSTALLED)
	$(UV) pip compile pyproject.toml --extra dev --python-version 3.11 \
		--custom-compile-command "make lock" -q -o requirements.lock

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis .ruff_cache
