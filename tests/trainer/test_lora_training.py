"""LoRA through the trainer: only adapters train, the base (= reference) never moves."""

import os

import jax
import numpy as np
import pytest

from experiments import grpo_lora
from rlpt.config import TrainConfig, from_config_dict
from rlpt.rollout.records import Outcome
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def trainer(tmp_path, monkeypatch):
  monkeypatch.chdir(ROOT)
  from rlpt.trainer import Trainer
  cd = grpo_lora.get_config("smoke")
  cd.progress = False
  cd.checkpoint.every = 0
  cd.optim.warmup_steps = 0  # the first update must move the adapters
  cd.base.cache_dir = base_cache_dir()
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp_path / "run"))
  # A reward with variance inside every group, whatever the smoke base emits.
  env_step = t.rollout.pool.step

  def step(episodes, answers):
    return [s._replace(graded=Outcome(float(len(a) % 2 == 0), len(a) % 2 == 0, "PASS", False, {}))
            for s, a in zip(env_step(episodes, answers), answers)]

  t.rollout.pool.step = step
  yield t
  t.close()


def test_only_adapters_train_and_the_reference_is_the_frozen_base(trainer, tmp_path):
  base_before = jax.tree.map(np.asarray, trainer.actor.ref_params)
  n_adapter = sum(x.size for x in jax.tree.leaves(trainer.actor.state.params))
  n_base = sum(x.size for x in jax.tree.leaves(base_before))
  assert 0 < n_adapter < n_base
  b_before = [np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(trainer.actor.state.params)
              if "lora_b" in jax.tree_util.keystr(p)]
  assert b_before and all(np.all(b == 0) for b in b_before)  # starts exactly at the base

  metrics = trainer.train_step()
  assert metrics["train/grad_norm"] > 0
  b_after = [np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(trainer.actor.state.params)
             if "lora_b" in jax.tree_util.keystr(p)]
  assert any(np.any(b != 0) for b in b_after)
  jax.tree.map(np.testing.assert_array_equal, base_before,
               jax.tree.map(np.asarray, trainer.actor.ref_params))
  # The sampler reads base + adapters, which now differs from the base.
  merged = jax.tree.map(np.asarray, trainer.actor.policy_params())
  diffs = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(a - b).max()), merged, base_before))
  assert max(diffs) > 0

  trainer.export(str(tmp_path / "export"))
  assert os.path.exists(tmp_path / "export" / "model.json")
  assert os.path.exists(tmp_path / "export" / "adapters" / "adapter_model.safetensors")
