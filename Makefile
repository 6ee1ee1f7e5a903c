# Everything a fresh machine needs: `make test` and `make demo` create .venv and install into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PLUGINS := $(sort $(wildcard plugins/opzoo-*))
STAMP := $(VENV)/.opzoo-installed
PYTEST_ARGS ?=

.PHONY: install test test-slow demo bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS)) | $(PY)
	$(PY) -m pip install --upgrade "pip>=23" "setuptools>=68" wheel
	$(PY) -m pip install -e ".[test]" $(addprefix -e ,$(PLUGINS))
	touch $(STAMP)

install: $(STAMP)

# The AOT tests run a second time on the PyTorch path (the one CUDA, bf16 and machines without a
# C compiler run), with the CPU kernels off; `make test PYTEST_ARGS=...` runs only what it names.
test: install
	$(PY) -m pytest $(PYTEST_ARGS)
ifeq ($(strip $(PYTEST_ARGS)),)
	OPZOO_AOT_CPU_KERNELS=0 $(PY) -m pytest -q tests/aot
endif

test-slow: install
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

# The main job: pretrain a micro POT on two generated PDE datasets (~5 min on 2 CPU cores),
# then roll it out on a test trajectory and plot it.
demo: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(VENV)/bin/opzoo pretrain configs/micro-pot.yaml
	$(VENV)/bin/opzoo rollout runs/micro-pot/model --data data/micro/ns.h5 --index 47 --plot runs/micro-pot/rollout.png

bench: install
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info plugins/*/*.egg-info demo_out runs data/micro
