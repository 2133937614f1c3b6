# otel-ext: `make demo` and `make test` are the only commands a fresh clone needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: venv demo test system-deps lint typecheck pytest bench semconv clean hta-venv

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py otel_ext/analysis/loaders/_cscan.c otel_ext/instrumentation/torch/_c10d_hook.cpp
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,nvml,dask]'
	# the collectives' native recording kernels, compiled once against the installed torch
	# (docs/instrumentation.md); without a compiler the instrumentor uses its Python hook
	$(PY) -m otel_ext.instrumentation.torch._c10d_native
	@touch $(STAMP)

demo: venv
	$(VENV)/bin/otel-ext demo $(DEMO_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy otel_ext

# two workers, each test file on one of them (CI has two cores; PYTEST_WORKERS=0 runs in
# this process, e.g. for a debugger)
PYTEST_WORKERS ?= 2
pytest: venv hta-venv
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# HTA 0.5.0 in a venv of its own (its pins clash with ours), for tests/analysis/test_hta_parity.py and
# benchmarks/hta_runner.py; where it cannot be installed (offline) the parity test skips locally
# and fails in CI, naming this target
HTA_VENV ?= $(or $(OTEL_EXT_HTA_VENV),/tmp/otel-ext-hta-venv)
hta-venv:
	@$(HTA_VENV)/bin/python -c "import hta" 2>/dev/null || { \
	  $(PYTHON) -m venv $(HTA_VENV) && \
	  $(HTA_VENV)/bin/python -m pip install --quiet holistictraceanalysis==0.5.0 'pandas<3' 'numpy<2' \
	  || echo "hta-venv: HTA 0.5.0 could not be installed in $(HTA_VENV); tests/analysis/test_hta_parity.py will not run"; }

# the Debian packages the integration tests need: installed when root with apt-get, otherwise
# one line names the integration tests that cannot run here and why
system-deps:
	@.ci/install-system-deps

test: system-deps lint typecheck pytest

# every benchmark script (hta_runner.py runs HTA in its own venv; _*.py are helpers)
bench: venv
	@for b in benchmarks/*.py; do \
	  case $$b in *hta_runner.py|*/_*.py) continue;; esac; \
	  echo "== $$b"; $(PY) $$b || exit 1; \
	done

semconv: venv
	$(VENV)/bin/otel-ext semconv generate

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache otel-ext-demo
