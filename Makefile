# gpulab: two commands on a fresh machine.
#   make lab    set up .venv (if needed) and open JupyterLab on the first notebook
#   make test   set up .venv (if needed) and run every test in simulator mode
# `make lab` installs the learner's packages (extras lab, data); test and lint add the developers' (test, lint).
# Servers: `make lab NO_BROWSER=1` (prints the URL instead of opening a browser).

# Python 3.12 when there is one: Colab's and the course's GPU image's Python, and the oldest that gets NumPy 2.5
# (whose removals broke numba-cuda's kernel compiles: gpulab/compat.py), so `make test` checks what a fresh
# install there gets. Else python3. PYTHON=python3.11 (or any) overrides; an existing .venv is kept as it is.
# A 3.12 counts only if it can make a venv: Debian/Ubuntu ship ensurepip apart (python3.12-venv), and a pyenv shim
# without 3.12 installed fails.
# $(call find_python,3.12): the first Python 3.12 (pyenv's, then python3.12 on PATH) that can make a venv, or nothing.
find_python = $(firstword $(foreach p,$(wildcard $(HOME)/.pyenv/versions/$(1)*/bin/python3) python$(1), \
                $(shell $(p) -c "import ensurepip" 2>/dev/null && command -v $(p))))
PY312  := $(call find_python,3.12)
PYTHON ?= $(or $(PY312),python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.gpulab-lab
DEV_STAMP := $(VENV)/.gpulab-dev
FIRST  ?= $(firstword $(sort $(wildcard notebooks/learner/0*.ipynb)))
PORT   ?= 8888
NO_BROWSER ?=
# Parallel pytest workers (each notebook runs in one worker): one more than the cores, because many tests wait
# (kernels starting, the grading tests' own time limits, the browser) and an extra worker fills those waits.
# Measured on 2 cores (2026-12-01): make test 944 s with 2 workers, 764 s with 3.
JOBS   ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PYTEST_ARGS ?=

.PHONY: setup setup-dev lab test test-fast test-network doctor gpu-check gpu-check-prep clean help test-oldest test-py313 lint

help:
	@echo "make lab        set up and open JupyterLab (NO_BROWSER=1 for servers, PORT=8888)"
	@echo "make setup      only set up .venv (extras lab, data), as make lab does"
	@echo "make setup-dev  .venv with the developers' extras too (test, lint)"
	@echo "make test       set up (adds the test and lint extras), lint (ruff, mypy: fails on an edited src/ that"
	@echo "                 does not pass), then unit, PTX, notebook and lab tests (simulator mode; 13-16 min on 2 cores)"
	@echo "make test-fast  the unit tests only (tests/), no lint and no notebooks"
	@echo "make test-network  opt-in, needs PyPI: the GPU extras resolve (pip --dry-run; downloads CUDA wheels)"
	@echo "make lint       ruff + mypy (calls into CuPy's Python layer checked against the installed CuPy)"
	@echo "make test-oldest  Colab's versions on Python 3.12 (OLDEST_PYTHON=...), installed --no-deps like Colab;"
	@echo "                 gpu-mode CuPy/numba-cuda names checked against CuPy 13 and numba-cuda 0.22"
	@echo "make test-py313  the simulator and harness tests on Python 3.13 (PY313=...), skipped where there is none"
	@echo "make doctor     print versions, the mode and known fixes"
	@echo "make gpu-check  on a CUDA machine: notebooks in gpu mode + benchmarks"
	@echo "make gpu-check-prep  .device/: wheels and MNIST for a GPU machine without network"
	@echo "make clean      remove .venv, .pytest_cache and artifacts (then make lab builds a fresh .venv)"

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install whenever pyproject.toml changes. A learner's venv (lab, data): JupyterLab and the notebook stack.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --upgrade "pip>=24"
	$(PIP) install -e ".[lab,data]"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (gpulab)" >/dev/null
	$(PY) -c "from gpulab.course import quiet_jupyterlab_news as q; q()"  # no 'Jupyter news?' pop-up
	touch $(STAMP)

# The developers' venv adds test and lint (pytest, nbval, nbgrader, repo2docker, playwright, mypy and CuPy for
# mypy) to the learner's; after `make lab`, `make test` installs only these.
$(DEV_STAMP): $(STAMP)
	$(PIP) install -e ".[lab,test,data,lint]"
	touch $(DEV_STAMP)

setup: $(STAMP)

setup-dev: $(DEV_STAMP)

lab: setup
	$(VENV)/bin/jupyter lab --port=$(PORT) $(if $(NO_BROWSER),--no-browser --ServerApp.ip=127.0.0.1,) \
	  $(if $(filter 0,$(shell id -u)),--allow-root,) $(FIRST)

# Tests never download: they read the MNIST originals from the workspace's shared folder when it exists
# (override with GPULAB_DATA_DIR=...); without any data the MNIST lessons fall back to scikit-learn's digits.
SHARED_MNIST := $(abspath $(wildcard ../shared/data/mnist))
TEST_DATA_DIR := $(or $(GPULAB_DATA_DIR),$(SHARED_MNIST))

lint: setup-dev
	$(PY) -m ruff check src tests setup.py
	$(PY) -m ruff format --check src tests setup.py  # `$(PY) -m ruff format src tests setup.py` fixes it
	$(PY) -m mypy

# nbval runs every lesson and lab solution once; tests/nbval_checks.py adds each notebook's CPU budget and the
# solutions' full marks.
# Tests never download: those marked `network` (pip resolving against PyPI) run only in `make test-network`.
test: setup-dev lint
	GPULAB_DEVICE=simulator $(if $(TEST_DATA_DIR),GPULAB_DATA_DIR=$(TEST_DATA_DIR),) $(PY) -m pytest -n $(JOBS) --dist loadfile \
	  -m "not network" --nbval-lax --nbval-current-env --nbval-cell-timeout=600 -p tests.nbval_checks \
	  --ignore=notebooks/learner tests notebooks labs/solutions $(PYTEST_ARGS)

test-fast: setup-dev
	GPULAB_DEVICE=simulator $(if $(TEST_DATA_DIR),GPULAB_DATA_DIR=$(TEST_DATA_DIR),) $(PY) -m pytest -n $(JOBS) -m "not network" tests $(PYTEST_ARGS)

# Opt-in, needs PyPI (downloads several hundred MB of CUDA wheels): the GPU extras resolve with pip --dry-run.
test-network: setup-dev
	$(PY) -m pytest -n 0 -m network tests $(PYTEST_ARGS)

# Colab's versions, the oldest gpulab supports, on Colab's Python (3.12): unit tests (not notebooks) in a
# second venv, with gpulab installed --no-deps exactly as Colab's setup cell does. scikit-learn is there as on
# Colab: without an MNIST copy the lessons fall back to its 8x8 digits. CuPy 13 (it installs without a GPU) is
# there for tests/test_api_versions.py: every CuPy and numba-cuda name that gpu-mode code, lessons and lab
# solutions use must exist in CuPy 13 and numba-cuda 0.22 (make test checks the newest).
# Not here: gpu-check's own tests (it runs on a GPU image's Python with the newest wheels, never on Colab).
OLDEST_VENV ?= .venv-oldest
OLDEST_PYTHON ?= $(or $(PY312),$(PYTHON))
OLDEST_PINS := "numba==0.60.*" "numba-cuda[cu12]==0.22.*" "cupy-cuda12x==13.*" "ipywidgets==7.7.*" "plotly==5.24.*"
test-oldest:
	test -x $(OLDEST_VENV)/bin/python || $(OLDEST_PYTHON) -m venv $(OLDEST_VENV)
	$(OLDEST_VENV)/bin/python -c "import sys; print('test-oldest on Python', sys.version.split()[0])"
	$(OLDEST_VENV)/bin/python -m pip --disable-pip-version-check install -q $(OLDEST_PINS) \
	  "numpy>=1.26" "tqdm>=4.66" "scikit-learn>=1.3" \
	  "pytest>=8" "pytest-xdist>=3.5" "pytest-timeout>=2.2" "nbformat>=5.9" "nbclient>=0.10" "ipykernel>=6.29" \
	  "rfc3987>=1.3"  # as in the test extra: jsonschema imports it instead of the slow rfc3987-syntax
	$(OLDEST_VENV)/bin/python -m pip --disable-pip-version-check install -q --no-deps .  # as Colab: no deps, not editable
	GPULAB_DEVICE=simulator $(if $(TEST_DATA_DIR),GPULAB_DATA_DIR=$(TEST_DATA_DIR),) $(OLDEST_VENV)/bin/python -m pytest -n $(JOBS) -m "not browser and not slow and not network" \
	  --ignore=tests/test_gpucheck.py --ignore=tests/test_nbexec.py tests $(PYTEST_ARGS)

# Python 3.13, the newest gpulab supports. CPython's compiler changes from version to version, and the simulator
# reads kernels' bytecode to run a block's threads in turn (gpulab/simulator/in_turn_source.py): on 3.13 every
# kernel once fell back to Numba's threads, 30x slower, and nothing else saw it. The simulator, harness and
# capstone tests in a venv of their own (measured 2026-12-03, 2 cores: install 70 s, tests 90 s). Skipped, with a
# message, where no Python 3.13 that can make a venv is found (PY313=... names one).
PY313  ?= $(call find_python,3.13)
PY313_VENV ?= .venv-py313
PY313_TESTS := tests/test_cooperative.py tests/test_simulator*.py tests/test_exercises_*.py tests/test_trace.py \
               tests/test_warps_both_modes.py tests/test_capstone.py tests/test_problems.py
test-py313:
	@if [ -z "$(PY313)" ]; then echo "test-py313: no Python 3.13 (with venv) found: skipped"; exit 0; fi; \
	if [ -z "$(wildcard $(PY313_TESTS))" ]; then echo "test-py313: none of PY313_TESTS exists: fix the list"; exit 2; fi; \
	set -e; test -x $(PY313_VENV)/bin/python || $(PY313) -m venv $(PY313_VENV); \
	$(PY313_VENV)/bin/python -c "import sys; print('test-py313 on Python', sys.version.split()[0])"; \
	$(PY313_VENV)/bin/python -m pip --disable-pip-version-check install -q ".[data]" "numba-cuda[cu12]" \
	  "pytest>=8" "pytest-xdist>=3.5" "pytest-timeout>=2.2" "nbformat>=5.9" "rfc3987>=1.3"; \
	GPULAB_DEVICE=simulator $(PY313_VENV)/bin/python -m pytest -n $(JOBS) -q -p no:cacheprovider \
	  $(wildcard $(PY313_TESTS)) $(PYTEST_ARGS)

# On a CUDA machine: .venv with the GPU extras, every notebook in gpu mode, benchmarks recorded.
# Offline: WHEELHOUSE=/path/to/wheels (pip --no-index) and GPULAB_DATA_DIR=/path/to/data.
gpu-check:
	$(PYTHON) src/gpulab/gpucheck.py --venv $(VENV)

# For a GPU machine with no network whose image has CUDA, CuPy and numba-cuda (CONTRIBUTING.md, "A lent
# GPU machine"): the wheels it lacks (gpulab/gpucheck_files.py) and the MNIST originals, into .device/.
gpu-check-prep: setup
	$(PY) src/gpulab/gpucheck.py --download-wheels .device/wheels
	$(if $(TEST_DATA_DIR),mkdir -p .device/mnist && cp -f $(TEST_DATA_DIR)/* .device/mnist/,@echo "no MNIST copy here (GPULAB_DATA_DIR or ../shared/data/mnist): lab09 falls back to digits there")
	du -sh .device

doctor: setup
	$(PY) -m gpulab doctor

clean:
	rm -rf $(VENV) .pytest_cache artifacts
