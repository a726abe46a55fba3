"""Advantage estimators against independent NumPy implementations (loops, float64)."""

import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.rl import (ADVANTAGE_ESTIMATORS, AdvantageInputs, compute_advantages, gae_advantages,
                     gae_advantages_and_returns, grpo_advantages, needs_value_model)

# float32 JAX vs float64 NumPy on O(1) values.
TOL = dict(rtol=1e-5, atol=1e-5)


def np_estimator(name, rewards, g, valid, eps=1e-6):
  rewards = rewards.astype(np.float64)
  valid = np.ones_like(rewards) if valid is None else valid.astype(np.float64)
  out = np.zeros_like(rewards)
  if name in ("reinforce_pp", "reinforce_pp_baseline"):
    x = rewards.copy()
    if name == "reinforce_pp_baseline":
      for s in range(0, len(x), g):
        sel = valid[s:s + g] > 0
        if sel.any():
          x[s:s + g] = x[s:s + g] - x[s:s + g][sel].mean()
    sel = valid > 0
    mu, sd = x[sel].mean(), x[sel].std()
    out[sel] = (x[sel] - mu) / (sd + eps)
    return out
  for s in range(0, len(rewards), g):
    for i in range(s, s + g):
      if valid[i] == 0:
        continue
      peers = [j for j in range(s, s + g) if valid[j] > 0]
      vals = rewards[peers]
      if name == "grpo":
        out[i] = (rewards[i] - vals.mean()) / (vals.std() + eps)
      elif name == "dr_grpo":
        out[i] = rewards[i] - vals.mean()
      elif name == "rloo":
        others = [rewards[j] for j in peers if j != i]
        out[i] = rewards[i] - np.mean(others) if others else 0.0
  return out


OUTCOME = ["grpo", "dr_grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"]


@pytest.mark.parametrize("name", OUTCOME)
@pytest.mark.parametrize("with_valid", [False, True])
def test_outcome_estimators_match_numpy(name, with_valid):
  rng = np.random.default_rng(0)
  g = 4
  rewards = rng.normal(size=32).astype(np.float32)
  rewards[:4] = 1.0  # a group with no variance
  valid = None
  if with_valid:
    valid = (rng.random(32) > 0.25).astype(np.float32)
    valid[4:8] = [1, 0, 0, 0]  # a single valid member: no baseline for RLOO
    valid[8:12] = 0            # a fully invalid group
  got = ADVANTAGE_ESTIMATORS[name](jnp.asarray(rewards), g,
                                   None if valid is None else jnp.asarray(valid))
  np.testing.assert_allclose(np.asarray(got), np_estimator(name, rewards, g, valid), **TOL)


def test_rloo_is_a_rescaled_dr_grpo():
  # r_i - mean_{j!=i} = K/(K-1) (r_i - mean): an identity independent of the loop above.
  r = jnp.asarray(np.random.default_rng(1).random(12), jnp.float32)
  np.testing.assert_allclose(np.asarray(ADVANTAGE_ESTIMATORS["rloo"](r, 6)),
                             np.asarray(ADVANTAGE_ESTIMATORS["dr_grpo"](r, 6)) * 6 / 5, **TOL)


def test_legacy_call_convention_still_works():
  r = jnp.array([1.0, 0.0, 0.5, 0.5])
  for name in OUTCOME:
    assert ADVANTAGE_ESTIMATORS[name](r, 2, jnp.ones(4)).shape == (4,)
  with pytest.raises(ValueError, match="needs values_BxT"):
    ADVANTAGE_ESTIMATORS["gae"](r, 2, jnp.ones(4))
  with pytest.raises(ValueError, match="not a multiple of group_size 3"):
    grpo_advantages(r, 3)


def np_gae(rewards, values, mask, gamma, lam, token_rewards=None):
  """Reference GAE: walk each row's generated positions from the last one back."""
  b, t = mask.shape
  adv = np.zeros((b, t))
  for i in range(b):
    idx = [j for j in range(t) if mask[i, j] > 0]
    r = np.zeros(t) if token_rewards is None else token_rewards[i].astype(np.float64).copy()
    if idx:
      r[idx[-1]] += rewards[i]
    next_v, next_a = 0.0, 0.0
    for k in reversed(idx):
      delta = r[k] + gamma * next_v - values[i, k]
      next_a = delta + gamma * lam * next_a
      next_v = values[i, k]
      adv[i, k] = next_a
  return adv, (adv + values) * mask


def gae_case(seed=2):
  rng = np.random.default_rng(seed)
  b, t = 6, 12
  mask = np.zeros((b, t), np.float32)
  mask[0, 3:9] = 1              # prompt, completion, padding
  mask[1, 2:5] = 1
  mask[1, 7:11] = 1             # two turns with environment tokens between
  mask[2, :] = 1                # fills the whole window
  mask[3, 5:6] = 1              # one token
  mask[5, 1:7] = 1              # row 4 is empty
  rewards = rng.normal(size=b).astype(np.float32)
  values = rng.normal(size=(b, t)).astype(np.float32)
  token_rewards = (rng.normal(size=(b, t)) * 0.1 * mask).astype(np.float32)
  return rewards, values, mask, token_rewards


@pytest.mark.parametrize("gamma,lam", [(1.0, 1.0), (0.99, 0.95), (0.9, 0.0)])
def test_gae_matches_numpy(gamma, lam):
  rewards, values, mask, tok = gae_case()
  adv, ret = gae_advantages_and_returns(jnp.asarray(rewards), jnp.asarray(values),
                                        jnp.asarray(mask), gamma=gamma, lam=lam,
                                        token_rewards_BxT=jnp.asarray(tok), whiten=False)
  want_adv, want_ret = np_gae(rewards, values, mask, gamma, lam, tok)
  np.testing.assert_allclose(np.asarray(adv), want_adv, **TOL)
  np.testing.assert_allclose(np.asarray(ret), want_ret, **TOL)


def test_gae_with_unit_gamma_lambda_is_return_minus_value():
  rewards, values, mask, _ = gae_case(3)
  adv, ret = gae_advantages_and_returns(jnp.asarray(rewards), jnp.asarray(values),
                                        jnp.asarray(mask), whiten=False)
  np.testing.assert_allclose(np.asarray(adv), (rewards[:, None] - values) * mask, **TOL)
  np.testing.assert_allclose(np.asarray(ret), rewards[:, None] * mask, **TOL)


def test_gae_whitening_and_valid_rows():
  rewards, values, mask, _ = gae_case(4)
  valid = np.array([1, 1, 0, 1, 1, 1], np.float32)
  inp = AdvantageInputs(jnp.asarray(rewards), jnp.asarray(mask), valid_B=jnp.asarray(valid),
                        values_BxT=jnp.asarray(values), gamma=0.99, lam=0.95)
  out = compute_advantages("gae", inp)
  m = mask * valid[:, None]
  raw, ret = np_gae(rewards, values, m, 0.99, 0.95)
  sel = m > 0
  want = np.zeros_like(raw)
  want[sel] = (raw[sel] - raw[sel].mean()) / (raw[sel].std() + 1e-6)
  np.testing.assert_allclose(np.asarray(out.adv_BxT), want, **TOL)
  np.testing.assert_allclose(np.asarray(out.returns_BxT), ret, **TOL)
  np.testing.assert_allclose(np.asarray(gae_advantages(
      inp.rewards_B, 1, inp.valid_B, values_BxT=inp.values_BxT, mask_BxT=inp.mask_BxT,
      gamma=0.99, lam=0.95)), want, **TOL)
  assert needs_value_model("gae") and not needs_value_model("grpo")
  from rlpt.rl import is_group_baseline
  assert [n for n in sorted(ADVANTAGE_ESTIMATORS) if is_group_baseline(n)] == [
      "dr_grpo", "grpo", "reinforce_pp_baseline", "rloo"]
  with pytest.raises(ValueError, match="Unknown advantage estimator 'grpoo'"):
    is_group_baseline("grpoo")


@pytest.mark.parametrize("name", OUTCOME)
def test_compute_advantages_lays_outcome_advantages_on_tokens(name):
  rng = np.random.default_rng(5)
  rewards = rng.random(8).astype(np.float32)
  mask = (rng.random((8, 5)) > 0.3).astype(np.float32)
  tok = (rng.normal(size=(8, 5)) * 0.1).astype(np.float32)
  out = compute_advantages(name, AdvantageInputs(jnp.asarray(rewards), jnp.asarray(mask),
                                                 group_size=4, token_rewards_BxT=jnp.asarray(tok)))
  # Per-token shaping is summed into the outcome reward first.
  shaped = rewards + (tok * mask).sum(axis=1)
  want = np_estimator(name, shaped, 4, None)[:, None] * mask
  np.testing.assert_allclose(np.asarray(out.adv_BxT), want, **TOL)
  assert out.returns_BxT is None
  with pytest.raises(ValueError, match="needs AdvantageInputs.values_BxT"):
    compute_advantages("gae", AdvantageInputs(jnp.asarray(rewards), jnp.asarray(mask)))
