# Everything a fresh machine needs: `make test` and `make demo` create .venv and install into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PLUGINS := $(sort $(wildcard plugins/opzoo-*))
STAMP := $(VENV)/.opzoo-installed
# The Well 1.1.0, the code that trained its published FNO/TFNO checkpoints (tests/well/test_well_as_trained.py runs
# it in its own process): beside the venv, not in it, since the test extra installs the fixed the_well 1.2.0
WELL_1_1_0 := $(VENV)/reference/the_well-1.1.0
# pdetransformer 0.1.11 (the PyPI wheel of PDE-Transformer's published checkpoints; tests/pdet run it in its own
# process): with the diffusers/transformers/huggingface_hub of its time (mid 2025), which must not meet opzoo's newer
# huggingface_hub in one process, and lightning/omegaconf for its prediction code (not its data or logging stack)
PDET_0_1_11 := $(VENV)/reference/pdetransformer-0.1.11
PDET_PINS := pdetransformer==0.1.11 diffusers==0.33.1 transformers==4.52.4 huggingface_hub==0.33.0 tokenizers==0.21.1 \
	regex importlib_metadata zipp lightning==2.5.1 lightning-utilities==0.14.3 torchmetrics==1.7.1 omegaconf==2.3.0 \
	antlr4-python3-runtime==4.9.3
# transformers 4.29.2, the version Poseidon's weights were trained with (scOT imports its Swin-v2 parts): for the
# Poseidon recordings, its live parity test (slow) and its benchmark beside opzoo, with OPZOO_POSEIDON_REPO naming a
# checkout of camlab-ethz/poseidon at v1-paper (`make poseidon-reference`; not part of install)
POSEIDON_REF := $(VENV)/reference/poseidon-transformers-4.29.2
POSEIDON_PINS := transformers==4.29.2 huggingface_hub==0.33.0 tokenizers==0.13.3 regex accelerate==0.31.0 psutil
PYTEST_ARGS ?=
# the default tiers run on every core (pytest-xdist), one intra-op thread per worker: on 2 cores, 1.5x faster than one
# process with 2 threads (many small tensors); a worker that runs out takes queued tests from the other (worksteal: the
# long tests do not leave one core idle at the end); PYTEST_WORKERS=0 runs in one process
PYTEST_WORKERS ?= auto
XDIST := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist worksteal)

.PHONY: install poseidon-reference test test-slow demo micro-weights micro-pot bench benchmark-tables model-cards clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml $(addsuffix /pyproject.toml,$(PLUGINS)) | $(PY)
	$(PY) -m pip install --upgrade "pip>=23" "setuptools>=68" wheel
	$(PY) -m pip install -e ".[test]" $(addprefix -e ,$(PLUGINS))
	$(PY) -m pip install --no-deps --upgrade --target $(WELL_1_1_0) the_well==1.1.0
	$(PY) -m pip install --no-deps --upgrade --target $(PDET_0_1_11) $(PDET_PINS)
	touch $(STAMP)

install: $(STAMP)

poseidon-reference: install
	$(PY) -m pip install --no-deps --upgrade --target $(POSEIDON_REF) $(POSEIDON_PINS)

# the core's tests run with no plugin loaded (OPZOO_PLUGINS empty): the core builds, tests and demos alone.
# Every tier runs even when an earlier one fails, and the failed tiers are named at the end.
test: install
	@failed=""; \
	$(VENV)/bin/ruff check opzoo plugins tests || failed="$$failed ruff"; \
	OPZOO_PLUGINS= OMP_NUM_THREADS=1 $(PY) -m pytest tests/core $(XDIST) $(PYTEST_ARGS) || failed="$$failed tests/core"; \
	OMP_NUM_THREADS=1 $(PY) -m pytest --ignore=tests/core $(XDIST) $(PYTEST_ARGS) || failed="$$failed tests(plugins)"; \
	if [ -n "$$failed" ]; then echo "make test: failed:$$failed"; exit 1; fi; echo "make test: every tier passed"

# the slow tier (about 24 min on 2 cores with workers, 2026-11-28; CI's budget is 30 min): on every core as well
test-slow: install
	OMP_NUM_THREADS=1 $(PY) -m pytest -m slow $(XDIST) $(PYTEST_ARGS)

# The main job, offline: dpot-micro and aot-pot-micro loaded by name with their shipped weights,
# held-out errors against the persistence baseline, fine-tuning on an unseen PDE, plots in demo_out/
# (about 3 minutes on 2 CPU cores).
demo: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=$${HF_HUB_OFFLINE:-1} $(VENV)/bin/opzoo demo

# Reproduce the shipped micro weights (configs/micro/, ~10-30 min per model on one CPU core) and copy
# them into the plugin packages; the model cards quote runs/micro/*/eval/ of these runs, docs/micro.md's
# table of every architecture is `python benchmarks/micro_table.py` after them.
MICRO_DESTS := dpot-micro:plugins/opzoo-fourier/opzoo_fourier aot-pot-micro:plugins/opzoo-aot/opzoo_aot \
  poseidon-micro:plugins/opzoo-poseidon/opzoo_poseidon gphyt-micro:plugins/opzoo-gphyt/opzoo_gphyt \
  morph-micro:plugins/opzoo-morph/opzoo_morph pdet-mc-micro:plugins/opzoo-pdet/opzoo_pdet
micro-weights: install
	for pair in $(MICRO_DESTS); do name=$${pair%%:*}; pkg=$${pair#*:}; \
	  OMP_NUM_THREADS=1 $(VENV)/bin/opzoo pretrain configs/micro/$$name.yaml || exit 1; \
	  mkdir -p $$pkg/pretrained/$$name; \
	  cp runs/micro/$$name/model/model.safetensors runs/micro/$$name/model/config.json $$pkg/pretrained/$$name/; \
	  cp runs/micro/$$name/eval/step-00004000.json $$pkg/pretrained/$$name/eval.json; \
	done

# The from-scratch example of docs/training.md: a micro POT pretrained on two generated datasets.
micro-pot: install
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(VENV)/bin/opzoo pretrain configs/micro-pot.yaml
	$(VENV)/bin/opzoo rollout runs/micro-pot/model --data data/micro/ns.h5 --index 47 --plot runs/micro-pot/rollout.png

# The benchmarks of docs/benchmarks.md in one Markdown report (gpu_report.md), on the GPU when there is one.
bench: install
	PYTHON=$(PY) benchmarks/gpu_report.sh

# model_cards/: every preset's card as published (tests/zoo/test_model_cards.py checks it is in sync)
model-cards: install
	$(VENV)/bin/opzoo cards --out model_cards

# docs/benchmarks.md's zoo tables: every preset as published, then The Well's FNO/TFNO with their Fourier blocks
# applied, as the_well 1.2.0 computes them (the published weights were trained with them dropped), side by side.
# Official DPOT is timed too when OPZOO_DPOT_REPO names a checkout of github.com/thu-ml/DPOT; pdetransformer
# from its reference copy (it needs the older huggingface_hub beside it, so in a process of its own).
BENCH_OUT ?= benchmarks/results
benchmark-tables: install
	$(VENV)/bin/opzoo benchmark "*" --threads 1 --out $(BENCH_OUT)/zoo.csv
	$(VENV)/bin/opzoo benchmark "well-fno-*" "well-tfno-*" --threads 1 --model-kwargs fourier_blocks=applied \
	  --out $(BENCH_OUT)/well-fno-applied.csv
	PYTHONPATH=$(PDET_0_1_11) $(VENV)/bin/opzoo benchmark "pdet-*" --threads 1 --resolution 128 128 --batch-size 1 \
	  --out $(BENCH_OUT)/pdet.csv

clean:
	rm -rf $(VENV) build *.egg-info plugins/*/*.egg-info demo_out runs data/micro data/micro-mix
