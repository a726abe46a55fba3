"""Long-context RL with the sequence sharded: the ring-attention run equals the dense one.

experiments/grpo_longctx.py:smoke (1K-token key-value retrieval) on 8
emulated devices, sequence axis 8: training, reference and scoring passes
use ring attention, the sampler prefills by ring attention and decodes over
a sequence-sharded KV cache. A second run differs only in using the base's
dense attention (the activations still sharded on the sequence by the
rules). Same samples, same loss and gradient norm.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments import grpo_longctx
from rlpt.config import TrainConfig, from_config_dict
from rlpt.rollout import Outcome
from tests.numerics import sum_rounding_atol
from tests.bases import base_cache_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _first_step(tmp, impl):
  from rlpt.trainer import Trainer
  cd = grpo_longctx.get_config("smoke")
  cd.progress = False
  cd.base.cache_dir = base_cache_dir()
  cd.base.attention_impl = impl
  # Shared-prefix scoring applies to dense attention only: off in both runs,
  # so that they differ in the attention kernel alone.
  cd.rl.shared_prefix = False
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp / (impl or "dense")))
  # The smoke base cannot retrieve; a reward with variance inside the group
  # (answer-length parity) gives the update a real gradient to compare.
  env_step = t.rollout.pool.step

  def step(episodes, answers):
    return [s._replace(graded=Outcome(float(len(a) % 2), bool(len(a) % 2), "PASS", False, {}))
            for s, a in zip(env_step(episodes, answers), answers)]

  t.rollout.pool.step = step
  try:
    assert dict(t.mesh.shape)["sequence"] == 8
    assert t.actor.model_cfg.attention_impl == (impl or "dense")
    return t.train_step()
  finally:
    t.close()


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("longctx")
  os.chdir(ROOT)
  return _first_step(tmp, "ring"), _first_step(tmp, "")


def test_ring_run_equals_dense_run(steps):
  ring, dense = steps
  assert ring["rollout/token_hash"] == dense["rollout/token_hash"]  # the same samples
  _assert_same_metrics(ring, dense)
  assert ring["train/grad_norm"] > 0


def _assert_same_metrics(ring, dense):
  for key in ("train/loss", "train/grad_norm"):
    np.testing.assert_allclose(ring[key], dense[key], rtol=1e-4, err_msg=key)
  # kl/sequence is the KL of the policy to itself (the reference is the
  # policy at step 0), zero up to rounding in either run: its tolerance is
  # set by the log-probabilities it sums (tests/numerics.py), not by 1e-6.
  # (Observed: |kl| within 2e-6 nats; per-sequence NLL 66, so atol 2.5e-4.)
  atol = sum_rounding_atol(2 * max(ring["rollout/nll"], dense["rollout/nll"]))
  for run in (ring, dense):
    assert abs(run["kl/sequence"]) <= atol, (run["kl/sequence"], atol)
  np.testing.assert_allclose(ring["rollout/nll"], dense["rollout/nll"], rtol=1e-5)


def test_comparison_catches_a_dropped_term(steps, tmp_path, monkeypatch):
  """The same comparison fails for a real error: ring attention that gives the
  key block arriving from each neighbour half its weight (a term lost in the
  ring's merge), in the sampler, the training and the reference passes alike."""
  from rlpt.attention import ring
  merge = ring._merge
  # Every merge after the first (the local block) folds in a neighbour's block.
  monkeypatch.setattr(ring, "_merge", lambda o1, lse1, o2, lse2: merge(
      o1, lse1, o2, lse2 - jnp.where(jnp.isneginf(lse1), 0.0, jnp.log(2.0))))
  jax.clear_caches()  # traces of the fixture's runs would hold the real merge
  try:
    broken = _first_step(tmp_path, "ring")
  finally:
    monkeypatch.undo()
    jax.clear_caches()
  with pytest.raises(AssertionError):
    _assert_same_metrics(broken, steps[1])


def test_bad_long_context_config_is_named():
  cd = grpo_longctx.get_config("smoke")
  cd.base.attention_impl = "flash"
  with pytest.raises(ValueError, match="base.attention_impl must be"):
    from_config_dict(TrainConfig, cd)
  with pytest.raises(ValueError, match="expected one of"):
    grpo_longctx.get_config("128k")
