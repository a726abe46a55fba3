"""Long-context RL with the sequence sharded: the ring-attention run equals the dense one.

experiments/grpo_longctx.py:smoke (1K-token key-value retrieval) on 8
emulated devices, sequence axis 8: training, reference and scoring passes
use ring attention, the sampler prefills by ring attention and decodes over
a sequence-sharded KV cache. A second run differs only in using the base's
dense attention (the activations still sharded on the sequence by the
rules). Same samples, same loss and gradient norm.
"""

import os

import numpy as np
import pytest

from experiments import grpo_longctx
from rlpt.config import TrainConfig, from_config_dict
from rlpt.rollout import Graded

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _first_step(tmp, impl):
  from rlpt.trainer import Trainer
  cd = grpo_longctx.get_config("smoke")
  cd.progress = False
  cd.base.cache_dir = str(tmp / "bases")
  cd.base.attention_impl = impl
  # Shared-prefix scoring applies to dense attention only: off in both runs,
  # so that they differ in the attention kernel alone.
  cd.rl.shared_prefix = False
  t = Trainer(from_config_dict(TrainConfig, cd), str(tmp / (impl or "dense")))
  # The smoke base cannot retrieve; a reward with variance inside the group
  # (answer-length parity) gives the update a real gradient to compare.
  env_step = t.pool.step

  def step(episodes, answers):
    return [s._replace(graded=Graded(float(len(a) % 2), bool(len(a) % 2), "PASS", False, {}))
            for s, a in zip(env_step(episodes, answers), answers)]

  t.pool.step = step
  try:
    assert dict(t.mesh.shape)["sequence"] == 8
    assert t.model_cfg.attention_impl == (impl or "dense")
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
  for key in ("train/loss", "train/grad_norm", "kl/sequence"):
    np.testing.assert_allclose(ring[key], dense[key], rtol=1e-4, atol=1e-6, err_msg=key)
  assert ring["train/grad_norm"] > 0


def test_bad_long_context_config_is_named():
  cd = grpo_longctx.get_config("smoke")
  cd.base.attention_impl = "flash"
  with pytest.raises(ValueError, match="base.attention_impl must be"):
    from_config_dict(TrainConfig, cd)
  with pytest.raises(ValueError, match="expected one of"):
    grpo_longctx.get_config("128k")
