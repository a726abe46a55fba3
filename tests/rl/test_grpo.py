"""GRPO advantages, the clipped objective and KL estimators against NumPy."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.rl import (ADVANTAGE_ESTIMATORS, LossConfig, grpo_advantages, kl_estimate, lookup,
                     policy_objective)


def np_grpo(rewards, g, valid=None, eps=1e-6):
  r = rewards.reshape(-1, g)
  v = np.ones_like(r) if valid is None else valid.reshape(-1, g)
  out = np.zeros_like(r)
  for i in range(r.shape[0]):
    sel = v[i] > 0
    if sel.any():
      mu, sd = r[i, sel].mean(), r[i, sel].std()
      out[i, sel] = (r[i, sel] - mu) / (sd + eps)
  return out.reshape(-1)


def np_objective(logp, old, ref, adv, mask, eps, beta):
  ratio = np.exp(logp - old)
  a = adv[:, None]
  pg = -np.minimum(ratio * a, np.clip(ratio, 1 - eps, 1 + eps) * a)
  d = np.clip(ref - logp, -10, 10)
  kl = np.exp(d) - d - 1
  return ((pg + beta * kl) * mask).sum() / mask.sum()


def test_grpo_advantages_match_numpy_with_masked_members():
  rng = np.random.default_rng(0)
  rewards = rng.random(24).astype(np.float32)
  valid = (rng.random(24) > 0.2).astype(np.float32)
  got = grpo_advantages(jnp.asarray(rewards), 6, jnp.asarray(valid))
  np.testing.assert_allclose(np.asarray(got), np_grpo(rewards, 6, valid), rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(np.asarray(grpo_advantages(jnp.asarray(rewards), 4)),
                             np_grpo(rewards, 4), rtol=1e-5, atol=1e-5)


def test_grpo_group_with_equal_rewards_has_zero_advantage():
  adv = grpo_advantages(jnp.array([1.0, 1.0, 1.0, 0.0, 1.0, 0.0]), 3)
  np.testing.assert_allclose(np.asarray(adv)[:3], 0.0)
  assert float(adv[3]) < 0 < float(adv[4])


def test_policy_objective_and_gradient_match_numpy():
  rng = np.random.default_rng(1)
  b, t = 6, 9
  logp = rng.normal(-2, 0.5, (b, t)).astype(np.float32)
  old = (logp + rng.normal(0, 0.3, (b, t))).astype(np.float32)
  ref = (logp + rng.normal(0, 0.3, (b, t))).astype(np.float32)
  adv = rng.normal(size=b).astype(np.float32)
  mask = (rng.random((b, t)) > 0.3).astype(np.float32)
  cfg = LossConfig(clip_eps=0.2, kl_beta=0.1)
  loss, m = policy_objective(*map(jnp.asarray, (logp, old, ref, adv, mask)), cfg)
  want = np_objective(logp, old, ref, adv, mask, 0.2, 0.1)
  np.testing.assert_allclose(float(loss), want, rtol=1e-5)

  # Gradient w.r.t. logp by central differences of the NumPy objective.
  g = jax.grad(lambda lp: policy_objective(lp, *map(jnp.asarray, (old, ref, adv, mask)), cfg)[0])(
      jnp.asarray(logp, jnp.float32))
  h = 1e-3
  for (i, j) in [(0, 0), (2, 3), (5, 8)]:
    up, dn = logp.astype(np.float64).copy(), logp.astype(np.float64).copy()
    up[i, j] += h
    dn[i, j] -= h
    fd = (np_objective(up, old, ref, adv, mask, 0.2, 0.1) -
          np_objective(dn, old, ref, adv, mask, 0.2, 0.1)) / (2 * h)
    np.testing.assert_allclose(float(g[i, j]), fd, atol=2e-4)


def test_on_policy_ratio_is_one_and_unclipped():
  logp = jnp.full((2, 3), -1.0)
  _, m = policy_objective(logp, logp, logp, jnp.array([1.0, -1.0]), jnp.ones((2, 3)), LossConfig())
  assert float(m["ratio_mean"]) == pytest.approx(1.0)
  assert float(m["clip_frac"]) == 0.0
  assert float(m["kl"]) == pytest.approx(0.0, abs=1e-7)


@pytest.mark.parametrize("name,fn", [
    ("k1", lambda lp, rf: lp - rf),
    ("k2", lambda lp, rf: 0.5 * (lp - rf) ** 2),
    ("k3", lambda lp, rf: np.exp(rf - lp) - (rf - lp) - 1),
])
def test_kl_estimators_match_numpy(name, fn):
  rng = np.random.default_rng(2)
  lp, rf = rng.normal(size=(2, 50)).astype(np.float32)
  np.testing.assert_allclose(np.asarray(kl_estimate(name, jnp.asarray(lp), jnp.asarray(rf))),
                             fn(lp, rf), rtol=1e-5, atol=1e-6)


def test_k3_is_an_unbiased_kl_estimate():
  # Samples from p, estimate KL(p || q) for two categoricals.
  p = np.array([0.5, 0.3, 0.2])
  q = np.array([0.2, 0.5, 0.3])
  x = np.random.default_rng(3).choice(3, size=200_000, p=p)
  est = np.asarray(kl_estimate("k3", jnp.log(p[x]), jnp.log(q[x]))).mean()
  np.testing.assert_allclose(est, np.sum(p * np.log(p / q)), rtol=0.02)


def test_unknown_names_list_the_known_ones():
  with pytest.raises(ValueError, match=r"Unknown advantage estimator 'grp'.*Did you mean 'grpo'"):
    lookup(ADVANTAGE_ESTIMATORS, "grp")
  with pytest.raises(ValueError, match="known"):
    LossConfig(kl_estimator="k4")
