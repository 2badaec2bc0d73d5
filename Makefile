# gpulab: two commands on a fresh machine.
#   make lab    set up .venv (if needed) and open JupyterLab on the first notebook
#   make test   set up .venv (if needed) and run every test in simulator mode
# Servers: `make lab NO_BROWSER=1` (prints the URL instead of opening a browser).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check
STAMP  := $(VENV)/.gpulab-installed
FIRST  ?= $(firstword $(sort $(wildcard notebooks/0*.ipynb)))
PORT   ?= 8888
NO_BROWSER ?=
# Parallel pytest workers (each notebook runs in one worker).
JOBS   ?= auto
PYTEST_ARGS ?=

.PHONY: setup lab test test-fast test-notebooks doctor release-labs gpu-check bench clean help

help:
	@echo "make lab        set up and open JupyterLab (NO_BROWSER=1 for servers, PORT=8888)"
	@echo "make test       set up and run unit, PTX, notebook and lab tests (simulator mode)"
	@echo "make doctor     print versions, the mode and known fixes"
	@echo "make gpu-check  on a CUDA machine: notebooks in gpu mode + benchmarks"

$(PY):
	$(PYTHON) -m venv $(VENV)

# Re-install whenever pyproject.toml changes.
$(STAMP): pyproject.toml | $(PY)
	$(PIP) install --upgrade "pip>=24"
	$(PIP) install -e ".[lab,test]"
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (gpulab)" >/dev/null
	touch $(STAMP)

setup: $(STAMP)

lab: setup
	$(VENV)/bin/jupyter lab --port=$(PORT) $(if $(NO_BROWSER),--no-browser --ServerApp.ip=127.0.0.1,) \
	  $(if $(filter 0,$(shell id -u)),--allow-root,) $(FIRST)

test: setup
	GPULAB_DEVICE=simulator $(PY) -m pytest -n $(JOBS) --dist loadfile \
	  --nbval-lax --nbval-current-env --nbval-cell-timeout=600 \
	  tests notebooks labs/solutions $(PYTEST_ARGS)

test-fast: setup
	GPULAB_DEVICE=simulator $(PY) -m pytest -n $(JOBS) tests $(PYTEST_ARGS)

doctor: setup
	$(PY) -m gpulab doctor

clean:
	rm -rf $(VENV) .pytest_cache artifacts
