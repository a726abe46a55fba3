# rlpt: two commands for a fresh machine.
#   make train   set up, then run the default RL experiment (CPU, minutes)
#   make test    set up, then run the test suite

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ROOTPATH := $(VENV)/.checkout-path
WORKDIR ?= runs/grpo_default
CONFIG ?= experiments/grpo_default.py

PEERS := .peers

.PHONY: setup system train smoke lint test bench bench-device bench-peers bench-peers-main clean

setup: system $(STAMP) $(ROOTPATH)

system:
	@bash launch/setup_system.sh

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $(STAMP)

# The checkout on the environment's path: `python -m launch.plan` (and every
# entry point, experiment and `python launch/x.py`) works from any directory.
$(ROOTPATH): $(STAMP)
	$(PY) -c "import os, site; open(os.path.join(site.getsitepackages()[0], 'rlpt-checkout.pth'), 'w').write(os.getcwd() + '\\n')"
	touch $(ROOTPATH)

train: setup
	$(PY) -m launch.train --config=$(CONFIG) --workdir=$(WORKDIR)

smoke: setup
	$(PY) -m launch.train --config=$(CONFIG):smoke --workdir=runs/smoke

# Pyflakes findings (pyproject.toml [tool.ruff]); the layer contract is tests/test_layers.py.
lint: setup
	$(PY) -m ruff check .

test: setup lint
	$(PY) -m pytest -q tests

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

# The main job (experiments/grpo_default.py) trained by rlpt and by TRL, side by
# side; TRL's environment also gets rlpt's environments package (no JAX) for the rewards.
$(PEERS)/trl/.environments: $(PEERS)/trl/.installed $(wildcard environments/*.py environments/*/*.py)
	$(PEERS)/trl/bin/pip install --quiet ./environments
	rm -rf environments/build environments/rlpt_environments.egg-info
	touch $@

bench-peers-main: setup $(PEERS)/trl/.environments
	$(PY) benchmarks/peers/main_job.py

clean:
	rm -rf $(VENV) $(PEERS) .cache runs
