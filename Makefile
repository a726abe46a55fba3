# rlpt: two commands for a fresh machine.
#   make train   set up, then run the default RL experiment (CPU, minutes)
#   make test    set up, then run the test suite

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WORKDIR ?= runs/grpo_default
CONFIG ?= experiments/grpo_default.py

.PHONY: setup system train smoke test bench clean

setup: system $(STAMP)

system:
	@bash launch/setup_system.sh

$(STAMP): requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements.txt
	touch $(STAMP)

train: setup
	$(PY) -m launch.train --config=$(CONFIG) --workdir=$(WORKDIR)

smoke: setup
	$(PY) -m launch.train --config=$(CONFIG):smoke --workdir=runs/smoke

test: setup
	$(PY) -m pytest -q tests

bench: setup
	$(PY) benchmarks/rl_step.py

clean:
	rm -rf $(VENV) .cache runs
