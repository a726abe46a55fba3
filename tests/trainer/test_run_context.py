"""Two runs in one process do not see each other (rlpt.device.RunContext).

Each trainer builds its own context: its own compiled-program pool (programs
kept, compiles counted, evictions), its own busy clock. Two trainers of the
same config alive at once, stepped in turn, keep separate programs and
counts, and train the same step to the same values (no state shared between
them changes what either computes).
"""

import os

import pytest

from experiments import grpo_default
from rlpt.config import TrainConfig, from_config_dict
from rlpt.metrics import WALL_CLOCK_PREFIXES
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _counts(trainer) -> tuple:
  p = trainer.ctx.programs
  return len(p), p.compiles, p.compile_s, p.evictions, p.capacity


def _values(metrics: dict) -> dict:
  return {k: v for k, v in metrics.items() if not k.startswith(WALL_CLOCK_PREFIXES)}


@pytest.mark.slow
def test_two_trainers_in_one_process_keep_their_own_programs_and_counters(tmp_path, monkeypatch):
  from rlpt.trainer import Trainer
  monkeypatch.chdir(ROOT)
  cd = grpo_default.get_config("smoke")
  cd.progress = False
  cd.checkpoint.update(every=0, export=False)
  cd.base.cache_dir = base_cache_dir()
  cfg = from_config_dict(TrainConfig, cd)
  a = Trainer(cfg, str(tmp_path / "a"))
  b = Trainer(cfg, str(tmp_path / "b"), max_programs=1)
  try:
    assert a.ctx.programs is not b.ctx.programs and a.ctx.busy is not b.ctx.busy
    assert (a.ctx.programs.capacity, b.ctx.programs.capacity) == (32, 1)
    b_before = _counts(b)
    ma = a.train_step()
    assert _counts(b) == b_before  # A's step made, counted and kept nothing of B's
    a_after = _counts(a)
    assert ma["host/programs"] == a_after[0] >= 3 and a_after[3] == 0  # sampler, scoring, update
    mb = b.train_step()
    assert _counts(a) == a_after  # nor B's of A's
    # B met A's shapes but not A's programs: it traced its own, within its bound.
    assert mb["host/programs"] == len(b.ctx.programs) == 1
    assert mb["host/program_evictions"] == b.ctx.programs.evictions >= a_after[0] - 1
    assert _values(ma) == _values(mb)
  finally:
    a.close()
    b.close()
