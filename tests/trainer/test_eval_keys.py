"""Evaluation does not draw from the training stream (rlpt.keys).

Two runs of the grpo_default smoke config that differ only in ``eval.every``
(every step vs only the base and the last step) train on the same batches:
every training metric (loss, rewards, the batch's token hash, gradient norm,
KL) is equal, and so is the evaluation both runs make after the last step.
Dynamic sampling is on, so the top-up rollouts' keys are covered too.
"""

import json
import os

import numpy as np
import pytest

from experiments import grpo_default
from rlpt.config import TrainConfig, from_config_dict
from rlpt.metrics import WALL_CLOCK_PREFIXES
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 3


def _run(tmp, name, every):
  from rlpt.trainer import Trainer
  cd = grpo_default.get_config("smoke")
  cd.steps = STEPS
  cd.progress = False
  cd.checkpoint.update(every=0, export=False)
  cd.optim.warmup_steps = 0  # every update moves the policy
  cd.rl.update(entropy_coef=0.05, dynamic_sampling=True, max_rollouts_per_step=2)
  cd.eval.update(every=every, tasks_per_domain=2)
  cd.base.cache_dir = base_cache_dir()
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp / name))
  try:
    t.run()
  finally:
    t.close()
  with open(tmp / name / "metrics.jsonl") as f:
    rows = [json.loads(line) for line in f]
  return ([{k: v for k, v in r.items() if not k.startswith(WALL_CLOCK_PREFIXES) and k != "kind"}
           for r in rows if r["kind"] == kind] for kind in ("train", "eval"))


@pytest.mark.slow
def test_evaluation_frequency_does_not_change_training(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  train_often, eval_often = _run(tmp_path, "often", 1)
  train_rarely, eval_rarely = _run(tmp_path, "rarely", 1000)
  assert [r["step"] for r in eval_often] == list(range(STEPS + 1))
  assert [r["step"] for r in eval_rarely] == [0, STEPS]
  # The comparison means something: samples and weights move every step.
  assert len({r["rollout/token_hash"] for r in train_often}) == STEPS
  assert all(r["train/grad_norm"] > 0 for r in train_often)
  assert [r["step"] for r in train_often] == list(range(1, STEPS + 1))
  for a, b in zip(train_often, train_rarely):
    assert a == b, {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}
  # The same weights evaluated at the same step use the same keys.
  for a, b in ((eval_often[0], eval_rarely[0]), (eval_often[-1], eval_rarely[-1])):
    assert a.keys() == b.keys()
    np.testing.assert_equal(a, b)
