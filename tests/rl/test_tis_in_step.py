"""Truncated importance weights taken inside the train step equal the two-pass form.

Two-pass reference (what the trainer does with several updates per batch):
score the batch with the policy, weight each token's advantage by
min(pi / pi_sampler, cap) on the host, and take the update with the policy's
own log-probs as old_logp. In-step (``LossConfig.behaviour_tis_cap``): the
batch carries the sampler's log-probs and the step derives both from its own
forward pass. Tolerances: loss and metrics 1e-6 relative, gradients 1e-5 of
each leaf's largest entry (fp32, same operations in a different order).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from rlpt.models import ModelConfig, Transformer
from rlpt.rl import LossConfig
from rlpt.sampling import SamplingParams
from rlpt.steps import LossCounts, RLBatch, policy_loss, sequence_logprobs

CFG = ModelConfig(vocab_size=64, d_model=32, num_layers=2, num_heads=4, num_kv_heads=2,
                  head_dim=8, mlp_dim=64)
CAP = 1.5


@pytest.mark.parametrize("loss", ["ppo_clip", "gspo", "dual_clip"])
def test_in_step_weights_equal_recomputed_two_pass(loss):
  graphdef, params = nnx.split(Transformer(CFG, nnx.Rngs(4)))
  rng = np.random.default_rng(5)
  b, length, prompt = 8, 18, 6
  tokens = jnp.asarray(rng.integers(1, 64, size=(b, length)), jnp.int32)
  sampling = SamplingParams(1.0)
  mask = jnp.asarray(np.arange(1, length)[None, :] >= prompt, jnp.float32).repeat(b, 0)
  policy = sequence_logprobs(graphdef, params, tokens, sampling)
  # A stale sampler: log-probs off by up to +-0.6 nats, so some weights hit the cap.
  sampler = policy + jnp.asarray(rng.uniform(-0.6, 0.6, size=policy.shape), jnp.float32)
  ref = policy + jnp.asarray(rng.normal(size=policy.shape) * 0.05, jnp.float32)
  adv = jnp.asarray(rng.normal(size=(b, 1)), jnp.float32) * mask
  counts = LossCounts(mask.sum(), jnp.float32(b))
  base = LossConfig(policy_loss=loss, kl_beta=0.04, kl_estimator="k3")

  weight = np.where(np.asarray(mask) > 0, np.minimum(np.exp(policy - sampler), CAP), 1.0)
  assert (weight[np.asarray(mask) > 0] == CAP).any() and (weight < CAP).any()
  two_pass = RLBatch(tokens, mask, policy, ref, adv * weight)
  in_step = RLBatch(tokens, mask, sampler, ref, adv)

  def run(batch, cfg):
    fn = lambda p: policy_loss(p, batch, counts, jnp.float32(0.04), graphdef=graphdef,
                               loss_cfg=cfg, sampling=sampling)
    (value, metrics), grads = jax.value_and_grad(fn, has_aux=True)(params)
    return value, metrics, grads

  want_loss, want_m, want_g = run(two_pass, base)
  got_loss, got_m, got_g = run(in_step, dataclasses.replace(base, behaviour_tis_cap=CAP))
  np.testing.assert_allclose(float(got_loss), float(want_loss), rtol=1e-6, atol=1e-7)
  for k in ("pg_loss", "kl", "ratio_mean"):
    np.testing.assert_allclose(float(got_m[k]), float(want_m[k]), rtol=1e-6, atol=1e-7)
  on = np.asarray(mask) > 0
  np.testing.assert_allclose(float(got_m["is_weight_mean"]), weight[on].mean(), rtol=1e-5)
  np.testing.assert_allclose(float(got_m["sampler_kl"]),
                             float(np.asarray(sampler - policy)[on].mean()), rtol=1e-5, atol=1e-7)
  for w, g in zip(jax.tree.leaves(want_g), jax.tree.leaves(got_g)):
    scale = float(jnp.max(jnp.abs(w)))
    assert scale > 0
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5 * scale, rtol=0)


def test_cap_below_one_is_rejected():
  with pytest.raises(ValueError, match="behaviour_tis_cap must be 0 \\(off\\) or >= 1, got 0.5"):
    LossConfig(behaviour_tis_cap=0.5)
