# The two commands a newcomer needs: `make demo` and `make test` (each sets itself up first).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test lint typecheck unit docs bench clean browser screenshots test-newest test-python test-under-load

setup: .make-setup .make-frontend

# The web UI's bundle (src/stepscope/web/static, not committed), rebuilt when its sources change.
FRONTEND_SRC := $(shell find frontend/src -name "*.ts") $(wildcard frontend/public/*) \
	frontend/package.json frontend/package-lock.json frontend/build.mjs frontend/tsconfig.json
.make-frontend: $(FRONTEND_SRC)
	cd frontend && npm ci --no-audit --no-fund --loglevel=error && npm run build
	touch .make-frontend

# A real browser for the UI tests: Debian's Chromium (installed when missing and we may).
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	      apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	    else echo "note: no chromium; the browser tests will be skipped"; fi; }

# Re-run the install whenever the project's dependencies change.
.make-setup: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev,reference]'
	# Keras 2 for the Keras fit reference test: without its dependencies (it would pull the
	# full tensorflow package over tensorflow-cpu), at the version of the TensorFlow installed.
	$(BIN)/python -m pip install -q --no-deps "tf-keras==$$($(BIN)/python -c \
	  'import importlib.metadata as m; print(m.version("tensorflow-cpu").rsplit(".", 1)[0])').*"
	touch .make-setup

# Profiles a sample workload, prints its report, then serves the web UI on it (Ctrl-C stops).
# Its own venv with stepscope's core only (no framework, no test tools), as a user installs it;
# its size on disk is printed first.
DEMO_VENV := .venv-demo
.make-demo: pyproject.toml setup.py .make-frontend
	test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --upgrade pip
	$(DEMO_VENV)/bin/python -m pip install -q -e .
	touch .make-demo

demo: .make-demo
	$(DEMO_VENV)/bin/python scripts/venv_size.py $(DEMO_VENV)
	$(DEMO_VENV)/bin/stepscope demo --logdir demo-logs --no-serve
	$(DEMO_VENV)/bin/stepscope report demo-logs
	$(DEMO_VENV)/bin/stepscope serve demo-logs

lint: setup
	$(BIN)/ruff check src tests benchmarks docs examples scripts
	$(BIN)/lint-imports  # the import contract of pyproject.toml [tool.importlinter]

typecheck: setup
	$(BIN)/mypy
	cd frontend && npm run --silent typecheck

# HTA (the traceinsight package), the GPU timeline's reference, in a venv of its own (its
# pandas and numpy pins must not move the main venv's); tests/test_gpu_timeline.py runs it.
.make-hta:
	test -x .venv-hta/bin/python || $(PYTHON) -m venv .venv-hta
	.venv-hta/bin/python -m pip install -q "traceinsight==0.6.1"
	touch .make-hta

unit: setup browser .make-hta
	STEPSCOPE_HTA_PYTHON=$(CURDIR)/.venv-hta/bin/python $(BIN)/pytest -q

test: lint typecheck docs unit

# The tests with two busy processes beside them (a loaded machine): see tests/under_load.sh.
test-under-load: setup browser
	PYTEST="$(BIN)/pytest" tests/under_load.sh -q


# The documentation site (MkDocs, Material theme) into site/; warnings fail the build.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# The docs' pictures, from the browser tests' screenshots of the current pages.
screenshots: setup browser
	$(BIN)/pytest -q $(wildcard tests/test_*ui.py)
	$(BIN)/python docs/screenshots.py

bench: setup
	$(BIN)/python benchmarks/trace_overhead.py
	$(BIN)/python benchmarks/load_and_overview.py
	$(BIN)/python benchmarks/capture.py
	$(BIN)/python benchmarks/capture_stop.py
	$(BIN)/python benchmarks/input_instrumentation.py
	$(BIN)/python benchmarks/bridge_overhead.py
	$(BIN)/python benchmarks/trace_viewer.py
	$(BIN)/python benchmarks/run_model.py
	$(BIN)/python benchmarks/memory_tracer.py
	$(BIN)/python benchmarks/memory_profile.py
	$(BIN)/python benchmarks/engines.py
	$(BIN)/python benchmarks/xla.py
	$(BIN)/python benchmarks/timeline.py
	$(BIN)/python benchmarks/memory_viewer.py
	$(BIN)/python benchmarks/step_groups.py

# The bridges and readers against the newest torch, JAX and TensorFlow on the registry (CPU;
# a venv of its own, .venv-newest; not part of `make test`: it downloads a few GB).
NEWEST := .venv-newest
NEWEST_TESTS := tests/test_bridges.py tests/test_interop.py tests/test_profile_cli.py
test-newest:
	test -x $(NEWEST)/bin/python || $(PYTHON) -m venv $(NEWEST)
	$(NEWEST)/bin/python -m pip install -q --upgrade pip
	$(NEWEST)/bin/python -m pip install -q --upgrade --upgrade-strategy eager -e '.[test]' \
	  torch jax jaxlib tensorflow-cpu tensorboard xprof
	$(NEWEST)/bin/python -c 'import importlib.metadata as m; print("newest:", ", ".join( \
	  f"{p} {m.version(p)}" for p in ("torch", "jax", "jaxlib", "tensorflow-cpu", "keras", "xprof")))'
	# One process per file: PyPI's CUDA build of torch loads Triton, whose import crashes in a
	# process where TensorFlow is loaded (both carry LLVM).
	for t in $(NEWEST_TESTS); do STEPSCOPE_REQUIRE_FRAMEWORKS=1 $(NEWEST)/bin/pytest -q $$t \
	  || exit 1; done

# The capture tests (the Python tracer's hooks differ by version: PEP 523 on 3.10-3.11,
# sys.monitoring on 3.12+) under another interpreter, e.g.
# `make test-python PY=~/.pyenv/versions/3.10.13/bin/python`. Not part of `make test`. Its venv
# and a copy of the tracked files (built there, so this checkout's .so files stay as they are)
# go under $(PY_DIR); no frameworks are installed.
PY ?= python3
PY_DIR ?= /tmp/stepscope-$(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PY_TESTS := tests/test_python_tracer.py tests/test_capture_records.py tests/test_capture.py
test-python:
	test -x $(PY_DIR)/venv/bin/python || $(PY) -m venv $(PY_DIR)/venv
	$(PY_DIR)/venv/bin/python -m pip install -q 'setuptools>=77' 'numpy>=1.24' \
	  'protobuf>=4.21' 'psutil>=5.9' 'grpcio>=1.59' 'pytest>=8'
	rm -rf $(PY_DIR)/src && mkdir -p $(PY_DIR)/src
	git ls-files -z | xargs -0 cp --parents -t $(PY_DIR)/src
	cd $(PY_DIR)/src && ../venv/bin/python setup.py -q build_ext --inplace \
	  && PYTHONPATH=src ../venv/bin/python -m pytest -q -p no:cacheprovider $(PY_TESTS)

clean:
	rm -rf $(VENV) .venv-hta .make-hta $(DEMO_VENV) $(NEWEST) .make-setup .make-demo .make-frontend build dist site \
	  src/*.egg-info demo-logs \
	  .bench-profiles frontend/node_modules src/stepscope/web/static test-artifacts
