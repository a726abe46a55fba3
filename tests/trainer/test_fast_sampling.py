"""The fast sampling path through the trainer: prefix sharing, int8 weights and KV cache.

A small base is pre-trained on the default domains' demonstrations (so it
solves a fair share of held-out tasks); then:

* prefix-shared groups sample the same tokens as the plain sampler, with the
  same log-probs as the policy's forward over the sequence;
* int8 weights + int8 KV cache earn the same held-out reward as fp32 on the
  default domains (greedy, every domain), and the trainer corrects the
  sampler's small mismatch with truncated importance weights.
"""

import os

import numpy as np
import pytest

from experiments import domains, grpo_default, pretrain_base
from rlpt.config import PretrainConfig, TrainConfig, from_config_dict
from rlpt.pretrain import pretrain

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Held-out reward of int8 sampling may differ from fp32 by at most this much
# (mean success over every default domain; greedy decoding).
REWARD_TOL = 0.03


@pytest.fixture(scope="module")
def base(tmp_path_factory):
  tmp = tmp_path_factory.mktemp("fastbase")
  cd = pretrain_base.get_config()
  cd.model.update(d_model=64, num_layers=2, num_heads=2, num_kv_heads=1, head_dim=32,
                  mlp_dim=192)
  cd.steps = 250
  cd.demo_noise = 0.0
  cd.optim.warmup_steps = 20
  return pretrain(from_config_dict(PretrainConfig, cd), str(tmp), progress=False)


def _trainer(tmp_path, base, **rollout):
  from rlpt.trainer import Trainer
  cd = grpo_default.get_config("smoke")
  cd.progress = False
  cd.checkpoint.every = 0
  cd.base.checkpoint = base
  cd.rollout.update(batch_size=64, group_size=8, **rollout)
  cd.eval.update(tasks_per_domain=24, sampled=False)
  name = "-".join(sorted(rollout)) or "plain"
  return Trainer(from_config_dict(TrainConfig, cd), str(tmp_path / name))


@pytest.fixture(scope="module")
def plain(base, tmp_path_factory):
  os.chdir(ROOT)
  t = _trainer(tmp_path_factory.mktemp("plain"), base)
  yield t
  t.close()


def test_prefix_shared_groups_sample_what_the_plain_sampler_samples(plain, base, tmp_path):
  shared = _trainer(tmp_path, base, share_prefix=True)
  try:
    assert shared.rollout.samplers.group_generate_fns  # the grouped program is the one used
    a, _ = plain.rollout.rollout()
    b, _ = shared.rollout.rollout()
    # Same tasks, same rng stream: identical tokens up to fp32 summation order.
    same_rows = np.mean(np.all(a.tokens == b.tokens, axis=1))
    assert same_rows >= 0.95, same_rows
    m = (a.loss_mask > 0) & np.all(a.tokens == b.tokens, axis=1)[:, None]
    np.testing.assert_allclose(b.old_logp[m], a.old_logp[m], atol=1e-4)
    # And the sampler's log-probs are the policy's (ratios start at exactly 1).
    lp = np.asarray(shared.actor.logprobs(shared.actor.policy_params(), b.tokens))
    mb = b.loss_mask > 0
    np.testing.assert_allclose(lp[mb], b.old_logp[mb], atol=2e-4)
  finally:
    shared.close()


def test_int8_weights_and_kv_earn_the_same_reward_on_the_default_domains(plain, base, tmp_path):
  assert list(plain.cfg.domains.ids) == list(domains.DEFAULT)
  fp32 = plain.evaluate()
  q = _trainer(tmp_path, base, weights_int8=True, kv_int8=True)
  try:
    int8 = q.evaluate()
    # The base is good enough for the comparison to mean something.
    assert fp32["success/mean"] > 0.1, fp32
    assert abs(int8["success/mean"] - fp32["success/mean"]) <= REWARD_TOL, (fp32, int8)
    for d in domains.DEFAULT:
      assert abs(int8[f"success/{d}"] - fp32[f"success/{d}"]) <= 0.15, (d, fp32, int8)

    m = q.train_step()
    # Sampler vs policy: a tiny mismatch, weighted out by truncated IS.
    assert 0 <= abs(m["rollout/sampler_kl"]) < 0.01
    assert 0.9 < m["rollout/is_weight_mean"] <= q.cfg.rl.tis_cap
    assert m["rollout/is_capped_fraction"] < 0.01
    assert np.isfinite(m["train/loss"])
  finally:
    q.close()


def test_truncated_is_weights_against_numpy():
  from rlpt.rl import truncated_is_weights
  rng = np.random.default_rng(0)
  pol = rng.normal(-2, 1, (4, 9)).astype(np.float32)
  smp = pol + rng.normal(0, 0.5, (4, 9)).astype(np.float32)
  mask = (rng.random((4, 9)) < 0.6).astype(np.float32)
  w, m = truncated_is_weights(pol, smp, mask, 1.5)
  ref = np.where(mask > 0, np.minimum(np.exp(pol - smp), 1.5), 1.0)
  np.testing.assert_allclose(np.asarray(w), ref, rtol=1e-6)
  on = mask > 0
  assert float(m["sampler_kl"]) == pytest.approx(float(np.mean((smp - pol)[on])), rel=1e-5)
  assert float(m["is_weight_mean"]) == pytest.approx(float(np.mean(ref[on])), rel=1e-6)
  assert float(m["is_capped_fraction"]) == pytest.approx(float(np.mean(np.exp(pol - smp)[on] > 1.5)))
