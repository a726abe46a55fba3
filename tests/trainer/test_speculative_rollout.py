"""Speculative decoding in the trainer: a distilled draft proposes, the policy decides.

The samples' log-probs are the policy's own (so RL ratios are exact), the
draft is distilled before the first step and refreshed on trained batches,
and acceptance is reported.
"""

import os

import jax
import numpy as np

from experiments import grpo_default
from rlpt.config import TrainConfig, from_config_dict
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_speculative_rollouts_carry_the_policy_logprobs(tmp_path, monkeypatch):
  from rlpt.trainer import Trainer
  monkeypatch.chdir(ROOT)
  cd = grpo_default.get_config("smoke")
  cd.progress = False
  cd.checkpoint.every = 0
  cd.speculative.update(gamma=3, warmup_steps=10, distill_every=1)
  cd.base.cache_dir = base_cache_dir()
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp_path / "run"))
  try:
    assert t.rollout.samplers.speculative is not None and not t.rollout.samplers.speculative.warm
    draft_before = jax.tree.map(np.asarray, t.rollout.samplers.speculative.draft_params)
    m = t.train_step()
    assert t.rollout.samplers.speculative.warm  # distilled before the first rollout
    assert 0.0 <= m["speculative/acceptance"] <= 1.0 and m["speculative/gamma"] == 3
    assert np.isfinite(m["distill/kl"])  # refreshed on the trained batch
    moved = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(a - np.asarray(b)).max()),
                                         draft_before, t.rollout.samplers.speculative.draft_params))
    assert max(moved) > 0

    arrays, _ = t.rollout.rollout()
    lp = np.asarray(t.actor.logprobs(t.actor.policy_params(), jax.device_put(arrays.tokens)))
    mask = arrays.loss_mask > 0
    assert mask.sum() > 0
    np.testing.assert_allclose(lp[mask], arrays.old_logp[mask], atol=2e-4)
  finally:
    t.close()
