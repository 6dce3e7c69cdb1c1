# The two commands a newcomer needs: `make demo` and `make test` (each sets itself up first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint typecheck unit bench clean

setup: .make-setup

# Re-run the install whenever the project's dependencies change.
.make-setup: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,reference]'
	touch .make-setup

demo: setup
	$(BIN)/stepscope demo --logdir demo-logs
	$(BIN)/stepscope report demo-logs

lint: setup
	$(BIN)/ruff check src tests benchmarks

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest -q

test: lint typecheck unit

bench: setup
	$(BIN)/python benchmarks/trace_overhead.py
	$(BIN)/python benchmarks/load_and_overview.py

clean:
	rm -rf $(VENV) .make-setup build dist src/*.egg-info demo-logs .bench-profiles
