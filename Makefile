# Two commands do everything: `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VAR_DIR ?= var
export VAR_DIR
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: system-deps install run test test-slow test-fast bench bench-artifacts bench-gateway bench-rollback bench-build-box bench-replies bench-gpu bench-experiments bench-collector bench-tune bench-llm llm-tools bench-llm-tools test-llm-tools bench-judge bench-gr bench-idle clean lint security

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Reinstalls only when pyproject.toml changes (the stamp carries its hash).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[test,torch]"
	rm -f $(VENV)/.installed-* && touch $@

# checkov (the manifests' security review in make test) in a virtualenv of its own: its
# pinned dependencies would fight the platform's.
CHECKOV := $(VENV)/checkov/bin/checkov
$(CHECKOV): | $(PY)
	$(PYTHON) -m venv $(VENV)/checkov
	$(VENV)/checkov/bin/pip install -q "checkov>=3.3,<3.4"

# Everything `make run` and `make test` need: the virtualenv, checkov's own one, and the
# Debian packages the tests drive (system-deps); `make test` then spends its time on tests.
install: $(STAMP) $(CHECKOV) system-deps


# A Redis answering on 127.0.0.1:6379 becomes the broker and the exposure streams (db 1;
# `make test` uses db 0) unless CELERY_BROKER_URL is set; otherwise the embedded
# filesystem broker, and experiments count no exposures (docs/getting-started.md, the demo experiment).
run: $(STAMP)
	@if [ -z "$$CELERY_BROKER_URL" ] && timeout 1 bash -c '</dev/tcp/127.0.0.1/6379' 2>/dev/null; then \
	  export CELERY_BROKER_URL=redis://127.0.0.1:6379/1; echo "make run: Redis answers: broker and exposure streams on $$CELERY_BROKER_URL"; fi; \
	if [ -z "$$EVENT_LOG_URL" ] && timeout 1 bash -c '</dev/tcp/127.0.0.1/4222' 2>/dev/null; then \
	  export EVENT_LOG_URL=nats://127.0.0.1:4222 EVENT_LOG_PREFIX=$${EVENT_LOG_PREFIX:-mp-$$(realpath -m $(VAR_DIR) | sha1sum | cut -c1-8)}; echo "make run: nats-server answers: the durable exposure and feedback log on $$EVENT_LOG_URL"; \
	else echo "make run: no nats-server on 127.0.0.1:4222: exposures and feedback go through Redis Streams"; fi; \
	  $(PY) manage.py run_platform

# Debian packages the browser test (chromium) and the gateway benchmark (nginx-light for
# its comparison column, wrk for its closed loop) need: installed when we may; otherwise
# it says so.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser test"; \
	    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium install failed: the browser test will skip"; \
	  else echo "chromium missing: the browser test will skip (apt-get install chromium)"; fi; }
	@command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus for the Prometheus-fed judge test and the rules check"; \
	    (apt-get update -qq && apt-get install -y -qq prometheus >/dev/null) || echo "prometheus install failed: its tests will fail in CI"; \
	  else echo "prometheus missing: apt-get install prometheus"; fi; }
	@{ command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; } && command -v wrk >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's nginx-light and wrk for the gateway benchmark"; \
	    (apt-get update -qq && apt-get install -y -qq nginx-light wrk >/dev/null) || echo "nginx-light/wrk install failed: make bench-gateway cannot compare with nginx"; \
	  else echo "nginx-light or wrk missing: make bench-gateway needs them (apt-get install nginx-light wrk)"; fi; }

# `make test` picks the real services when they answer (PostgreSQL, Redis) and falls
# back to SQLite + kombu's filesystem broker when not; tests/services.py says which.
# One format and the checks ruff runs (complexity included), then the import directions
# between the apps, the kernel and the gateway ([tool.ruff], [tool.importlinter] in pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff format --check --quiet . || { echo "make lint: run .venv/bin/ruff format ."; exit 1; }
	$(VENV)/bin/ruff check --quiet .
	$(VENV)/bin/lint-imports --no-logo

# Independent tests run on PYTEST_WORKERS processes (pytest-xdist; each its own test database,
# Redis db and VAR_DIR: tests/xdist_workers.py); PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= 4
XDIST = $(if $(filter 0,$(PYTEST_WORKERS)),,-p tests.xdist_workers -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder)

test: install lint
	@eval "$$($(PY) tests/services.py --exports)" && \
	  $(PY) -m pytest $(XDIST) --durations=25 -m "not slow" $(PYTEST_ARGS)

# The tests too slow for make test's budget (marker `slow`: minutes of real rollouts each).
test-slow: install
	@eval "$$($(PY) tests/services.py --exports)" && \
	  $(PY) -m pytest --durations=10 -m slow $(PYTEST_ARGS)

test-fast: install lint
	@eval "$$($(PY) tests/services.py --exports)" && \
	  $(PY) -m pytest -m "not integration and not browser" $(PYTEST_ARGS)

security: install  ## the schemathesis run against the live API, longer than in make test
	@eval "$$($(PY) tests/services.py --exports)" && \
	  SCHEMATHESIS_MAX_EXAMPLES=$${SCHEMATHESIS_MAX_EXAMPLES:-50} SCHEMATHESIS_MAX_TIME=$${SCHEMATHESIS_MAX_TIME:-900} \
	  $(PY) -m pytest tests/security $(PYTEST_ARGS)

bench: bench-artifacts bench-gateway bench-rollback bench-build-box bench-replies

bench-artifacts: install
	$(PY) -m bench artifacts

bench-gateway: install system-deps
	$(PY) -m bench gateway

# e.g. make bench-rollback ROLLBACK_ARGS="--runs 10 --rates 200" (python -m bench rollback --help)
bench-rollback: install
	$(PY) -m bench rollback $(ROLLBACK_ARGS)

bench-build-box: install
	$(PY) -m bench build_box

bench-replies: install
	$(PY) -m bench replies

# Online experiments: exposure logging's cost on the gateway, feedback ingest rate,
# time to decision sequential vs fixed horizon (var/bench/experiments.json).
bench-experiments: install
	$(PY) -m bench experiments

# The built-in collector on 1,000 scrape targets per tick (var/bench/collector.json).
bench-collector: install
	$(PY) -m bench collector $(COLLECTOR_ARGS)

# The tune stage on the reference ranker (table of configs tried, best vs default within the
# SLO) and the 500 ms stall before/after, side by side (var/bench/tune.json).
# e.g. make bench-tune TUNE_ARGS="--slo-ms 20 --budget-s 600"
bench-tune: install
	$(PY) -m bench tune $(TUNE_ARGS)

# The GPU check (runs anywhere; on a machine without a GPU its GPU rows say why they are skipped).
# LLM streams: TTFT and ITL the gateway adds over each backend (Triton, transformers serve, the
# provider stand-in), streams per core, failover past a dead backend (var/bench/llm.json).
# e.g. make bench-llm LLM_ARGS="--quick"
bench-llm: install llm-tools
	$(PY) -m bench llm $(LLM_ARGS)
	$(PY) -m bench llm_tools $(LLM_TOOLS_ARGS)

# aiperf, guidellm and genai-perf (with tritonclient 2.51.0's perf_analyzer), a venv each under var/tools/
llm-tools: install
	$(PY) -c "from bench.llm_tools import install; install()"

# e.g. make bench-llm-tools LLM_TOOLS_ARGS="--quick"
bench-llm-tools: llm-tools
	$(PY) -m bench llm_tools $(LLM_TOOLS_ARGS)

# the three tools on a bounded run through the real gateway; fails unless each runs clean
test-llm-tools: llm-tools
	$(PY) -m bench llm_tools --quick --streams 1,4 --check

# An idle `make run` with the demo loaded: CPU and PSS per component (var/bench/idle.json).
bench-idle: install
	$(PY) -m bench idle $(IDLE_ARGS)

bench-gpu: install
	$(PY) -m bench gpu --reference

# The judge's error rates: >= 1,000 A/A rollouts and >= 50 per fault class replayed from recorded
# traces (bench/data/judge/) through the beat's judge code, and A/A experiments under continuous
# peeking (var/bench/judge.json). Record a trace: python -m bench judge record NAME [--hogs N].
# e.g. make bench-judge JUDGE_ARGS="--aa-per-cell 10 --faults-per-cell 1 --experiments 50"
bench-judge: install
	$(PY) -m bench judge $(JUDGE_ARGS)

# The reference generative recommender: HR@10 against the oracle and a SASRec baseline, illegal
# ids with and without the trie, each variant's beam overlap, latency with and without a cached
# prefix on tritonserver (var/bench/gr.json). e.g. make bench-gr GR_ARGS="--quick"
bench-gr: install
	$(PY) -m bench gr $(GR_ARGS)

clean:
	rm -rf $(VENV) $(VAR_DIR)
