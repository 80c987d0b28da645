# Two commands do everything: `make run` and `make test` (see README.md).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
VAR_DIR ?= var
export VAR_DIR
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: install run test test-fast bench bench-artifacts bench-gateway bench-rollback clean lint

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# Reinstalls only when pyproject.toml changes (the stamp carries its hash).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e ".[test,torch]"
	rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

run: install
	$(PY) manage.py run_platform

# `make test` picks the real services when they answer (PostgreSQL, Redis) and falls
# back to SQLite + kombu's filesystem broker when not; tests/services.py says which.
test: install
	@eval "$$($(PY) tests/services.py --exports)" && \
	  $(PY) -m pytest $(PYTEST_ARGS)

test-fast: install
	@eval "$$($(PY) tests/services.py --exports)" && \
	  $(PY) -m pytest -m "not integration and not browser" $(PYTEST_ARGS)

bench: bench-artifacts bench-gateway bench-rollback

bench-artifacts: install
	$(PY) -m bench artifacts

bench-gateway: install
	$(PY) -m bench gateway

bench-rollback: install
	$(PY) -m bench rollback

clean:
	rm -rf $(VENV) $(VAR_DIR)
