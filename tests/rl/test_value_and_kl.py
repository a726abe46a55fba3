"""Value loss, KL in the reward and the KL coefficient controllers against NumPy."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.rl import (AdaptiveKLController, AdvantageInputs, FixedKLController, ValueLossConfig,
                     compute_advantages, kl_penalized_rewards_B, kl_reward_penalty_BxT,
                     make_kl_controller, sequence_kl_B, value_objective)

TOL = dict(rtol=1e-5, atol=1e-6)


def case(seed=0, b=6, t=8):
  rng = np.random.default_rng(seed)
  v = rng.normal(size=(b, t)).astype(np.float32)
  old = (v + rng.normal(0, 0.3, (b, t))).astype(np.float32)
  ret = rng.normal(size=(b, t)).astype(np.float32)
  mask = (rng.random((b, t)) > 0.3).astype(np.float32)
  return v, old, ret, mask


def np_value_loss(v, old, ret, mask, eps, seq_mean=False):
  v, old, ret = (x.astype(np.float64) for x in (v, old, ret))
  per = (v - ret) ** 2
  if eps is not None:
    per = np.maximum(per, (old + np.clip(v - old, -eps, eps) - ret) ** 2)
  per = 0.5 * per
  if seq_mean:
    rows = [i for i in range(len(mask)) if mask[i].sum()]
    return np.mean([(per[i] * mask[i]).sum() / mask[i].sum() for i in rows])
  return (per * mask).sum() / mask.sum()


@pytest.mark.parametrize("eps", [0.2, None])
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_value_objective_matches_numpy(eps, agg):
  v, old, ret, mask = case()
  cfg = ValueLossConfig(value_clip=eps, aggregation=agg)
  loss, m = value_objective(*map(jnp.asarray, (v, old, ret, mask)), cfg)
  want = np_value_loss(v, old, ret, mask, eps, agg != "token-mean")
  np.testing.assert_allclose(float(loss), want, **TOL)
  if eps is not None:
    assert 0 < float(m["value_clip_frac"]) < 1


def test_value_gradient_flows_only_through_current_values():
  v, old, ret, mask = case(1)
  cfg = ValueLossConfig(value_clip=0.2)
  g_old, g_ret = jax.grad(lambda o, r: value_objective(jnp.asarray(v), o, r, jnp.asarray(mask),
                                                       cfg)[0], argnums=(0, 1))(
      jnp.asarray(old), jnp.asarray(ret))
  assert not np.asarray(g_old).any() and not np.asarray(g_ret).any()
  # Central differences of the NumPy loss at a few entries.
  g = jax.grad(lambda x: value_objective(x, *map(jnp.asarray, (old, ret, mask)), cfg)[0])(
      jnp.asarray(v))
  h = 1e-4
  for i, j in [(0, 0), (2, 5), (5, 7)]:
    up, dn = v.astype(np.float64).copy(), v.astype(np.float64).copy()
    up[i, j] += h
    dn[i, j] -= h
    fd = (np_value_loss(up, old, ret, mask, 0.2) - np_value_loss(dn, old, ret, mask, 0.2)) / (2 * h)
    np.testing.assert_allclose(float(g[i, j]), fd, atol=1e-4)


def test_value_config_rejects_bad_clip():
  with pytest.raises(ValueError, match="value_clip must be > 0.*-1"):
    ValueLossConfig(value_clip=-1.0)


def test_kl_in_the_reward_matches_numpy():
  rng = np.random.default_rng(2)
  logp = rng.normal(-2, 0.5, (4, 6)).astype(np.float32)
  ref = (logp + rng.normal(0, 0.3, (4, 6))).astype(np.float32)
  mask = (rng.random((4, 6)) > 0.3).astype(np.float32)
  rewards = rng.random(4).astype(np.float32)
  beta = 0.05
  k1 = (logp - ref).astype(np.float64) * mask
  np.testing.assert_allclose(np.asarray(kl_reward_penalty_BxT(*map(jnp.asarray, (logp, ref, mask)),
                                                              beta)), -beta * k1, **TOL)
  np.testing.assert_allclose(np.asarray(sequence_kl_B(*map(jnp.asarray, (logp, ref, mask)))),
                             k1.sum(1), **TOL)
  d = np.clip(ref - logp, -10, 10).astype(np.float64)
  k3 = (np.exp(d) - d - 1) * mask
  np.testing.assert_allclose(np.asarray(kl_penalized_rewards_B(
      *map(jnp.asarray, (rewards, logp, ref, mask)), beta, "k3")), rewards - beta * k3.sum(1),
      **TOL)
  # Per-token penalty feeds GAE: with gamma = lam = 1 the advantage is the
  # reward-to-go (penalties from t on, plus the outcome) minus V_t.
  values = rng.normal(size=(4, 6)).astype(np.float32)
  out = compute_advantages("gae", AdvantageInputs(
      jnp.asarray(rewards), jnp.asarray(mask), values_BxT=jnp.asarray(values), whiten=False,
      token_rewards_BxT=kl_reward_penalty_BxT(*map(jnp.asarray, (logp, ref, mask)), beta)))
  to_go = np.cumsum((-beta * k1)[:, ::-1], axis=1)[:, ::-1] + rewards[:, None]
  np.testing.assert_allclose(np.asarray(out.adv_BxT), (to_go - values) * mask, **TOL)


def np_adaptive(beta, target, horizon, kls, n):
  out = []
  for kl in kls:
    e = np.clip(kl / target - 1, -0.2, 0.2)
    beta = beta * (1 + e * n / horizon)
    out.append(beta)
  return out


def test_adaptive_kl_controller_follows_ziegler_and_round_trips():
  kls = [0.5, 12.0, 6.1, 5.9, 0.0, 6.0]
  ctl = make_kl_controller("adaptive", 0.1, target=6.0, horizon=10_000)
  got = [ctl.update(kl, 256) for kl in kls[:3]]
  state = json.loads(json.dumps(ctl.state_dict()))
  ctl2 = AdaptiveKLController(1.0, 1.0, 1.0)
  ctl2.load_state_dict(state)
  got += [ctl2.update(kl, 256) for kl in kls[3:]]
  np.testing.assert_allclose(got, np_adaptive(0.1, 6.0, 10_000, kls, 256), rtol=1e-12)
  # Above target the coefficient grows, below it shrinks.
  assert got[1] > got[0] and got[4] < got[3]


def test_fixed_controller_and_bad_controller_arguments():
  ctl = make_kl_controller("fixed", 0.05)
  assert isinstance(ctl, FixedKLController) and ctl.update(100.0, 64) == 0.05
  with pytest.raises(ValueError, match="needs target and horizon"):
    make_kl_controller("adaptive", 0.1)
  with pytest.raises(ValueError,
                     match=r"Unknown KL controller 'adaptiv'.*known: \['adaptive', 'fixed'\]"):
    make_kl_controller("adaptiv", 0.1)
  with pytest.raises(ValueError, match="target KL must be > 0 nats, got -1"):
    AdaptiveKLController(0.1, -1, 100)
