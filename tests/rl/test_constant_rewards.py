"""A group whose valid members all got the same reward carries no signal: its
advantage is exactly 0.0 under every estimator with a group baseline, and
DAPO's dynamic sampling drops it.

The float32 mean of eight 0.7s is off by ~6e-8; divided by (std + 1e-6) that
once gave each member +0.056 (0.3: +0.029, 0.1: -0.0074). The trainer's
top-up with uninformative groups and the dynamic-sampling filter rely on the
exact zero.

Non-constant groups are checked against a float64 NumPy reference at
rtol = atol = 1e-5 (float32 arithmetic on O(1) rewards).
"""

import jax.numpy as jnp
import numpy as np
import pytest

from rlpt.rl import (ADVANTAGE_ESTIMATORS, AdvantageInputs,
                     compute_advantages, fill_groups, gae_advantages_and_returns,
                     groups_with_signal, masked_whiten, needs_value_model)

TOL = dict(rtol=1e-5, atol=1e-5)
CONSTANTS = (0.1, 0.3, 0.7)
# Which baseline each registered estimator uses. A new estimator must be
# added here (test_every_estimator_is_classified), so it is tested below.
#   group: a per-group baseline; a constant group gets 0 in any batch.
#   batch: one baseline for the whole batch; only a constant batch gets 0.
#   value: a learned value baseline (GAE), tested separately.
KIND = {"grpo": "group", "dr_grpo": "group", "rloo": "group", "reinforce_pp_baseline": "group",
        "reinforce_pp": "batch", "gae": "value"}
OUTCOME = sorted(n for n in ADVANTAGE_ESTIMATORS if not needs_value_model(n))


def reference(name, rewards, g, valid, eps=1e-6):
  """Float64 NumPy, one group at a time, over valid members only."""
  r = rewards.astype(np.float64)
  v = valid > 0
  out = np.zeros_like(r)
  x = r.copy()
  for s in range(0, len(r), g):
    sel = np.flatnonzero(v[s:s + g]) + s
    if not len(sel):
      continue
    vals = r[sel]
    if name == "grpo":
      out[sel] = (vals - vals.mean()) / (vals.std() + eps)
    elif name == "dr_grpo":
      out[sel] = vals - vals.mean()
    elif name == "rloo":
      for i in sel:
        others = [r[j] for j in sel if j != i]
        out[i] = r[i] - np.mean(others) if others else 0.0
    elif name == "reinforce_pp_baseline":
      x[sel] = vals - vals.mean()
  if name in ("reinforce_pp", "reinforce_pp_baseline"):
    out[v] = (x[v] - x[v].mean()) / (x[v].std() + eps)
  return out


def mixed_batch(k=8):
  """Six groups of k: constant (0.7, 0.1, 0.3) and not, with invalid members.

  Invalid members hold other values (0.0, 1.0): they must not spoil the
  equality of the valid ones.
  """
  rng = np.random.default_rng(0)
  r = rng.random((6, k)).astype(np.float32)
  valid = np.ones((6, k), np.float32)
  r[0] = 0.7                                   # constant, all valid
  r[2] = 0.1
  r[2, [1, 4]] = [0.0, 1.0]
  valid[2, [1, 4]] = 0                         # constant over its valid members
  r[4] = 0.3
  r[4, 0] = 0.9
  valid[4, 0] = 0                              # the first member is invalid
  valid[3, [0, 5]] = 0                         # non-constant, masked members
  valid[5, 1:] = 0                             # one valid member
  return r.reshape(-1), valid.reshape(-1), k, (0, 2, 4, 5)


def test_every_estimator_is_classified():
  assert set(KIND) == set(ADVANTAGE_ESTIMATORS), (
      "classify the new advantage estimator in KIND: "
      f"{sorted(set(ADVANTAGE_ESTIMATORS) ^ set(KIND))}")


@pytest.mark.parametrize("name", OUTCOME)
@pytest.mark.parametrize("value", CONSTANTS)
@pytest.mark.parametrize("k", [7, 8, 16])
def test_a_batch_of_constant_groups_gets_exactly_zero(name, value, k):
  # Every outcome estimator, the batch-baseline one (reinforce_pp) included.
  r = jnp.full((4 * k,), value, jnp.float32)
  for valid in (None, jnp.asarray(np.arange(4 * k) % 3 > 0, jnp.float32)):
    adv = np.asarray(ADVANTAGE_ESTIMATORS[name](r, k, valid))
    assert np.all(adv == 0.0), (name, value, k, adv[adv != 0][:4])


@pytest.mark.parametrize("value", CONSTANTS)
def test_reinforce_pp_on_a_constant_batch_is_zero(value):
  # One group of 32 and 8 groups of 4: the batch baseline ignores the grouping.
  for g in (32, 4):
    adv = np.asarray(ADVANTAGE_ESTIMATORS["reinforce_pp"](jnp.full((32,), value), g))
    np.testing.assert_array_equal(adv, 0.0)


@pytest.mark.parametrize("name", OUTCOME)
@pytest.mark.parametrize("k", [7, 8])
def test_mixed_batch_constant_groups_zero_others_match_float64(name, k):
  r, valid, k, constant = mixed_batch(k)
  adv = np.asarray(ADVANTAGE_ESTIMATORS[name](jnp.asarray(r), k, jnp.asarray(valid)))
  adv_GxK = adv.reshape(-1, k)
  assert np.all(adv[valid == 0] == 0.0)
  if KIND[name] == "group":
    for gi in constant:
      assert np.all(adv_GxK[gi] == 0.0), (name, gi, adv_GxK[gi])
  np.testing.assert_allclose(adv, reference(name, r, k, valid), **TOL)


@pytest.mark.parametrize("name", OUTCOME)
def test_compute_advantages_of_constant_groups_is_zero_on_every_token(name):
  rng = np.random.default_rng(1)
  mask = (rng.random((16, 6)) > 0.3).astype(np.float32)
  out = compute_advantages(name, AdvantageInputs(jnp.full((16,), 0.7), jnp.asarray(mask),
                                                 group_size=8))
  np.testing.assert_array_equal(np.asarray(out.adv_BxT), 0.0)


@pytest.mark.parametrize("value", CONSTANTS)
def test_gae_whitening_of_equal_advantages_is_zero(value):
  """GAE has no group baseline: constant rewards give A_t = R - V_t (gamma = lam = 1),
  non-zero in general. What is tested: when every masked raw advantage is the
  same (constant rewards and a constant value, as from the critic's zero-initialised
  head), whitening gives exactly 0; without whitening it is R - V."""
  b, t = 8, 6
  mask = np.ones((b, t), np.float32)
  mask[:, :2] = 0      # prompt
  mask[3, 5] = 0       # a shorter answer
  rewards = jnp.full((b,), value)
  values = jnp.zeros((b, t))
  raw, _ = gae_advantages_and_returns(rewards, values, jnp.asarray(mask), whiten=False)
  np.testing.assert_allclose(np.asarray(raw), value * mask, **TOL)
  for c in (0.0, 0.25):
    inp = AdvantageInputs(rewards, jnp.asarray(mask), group_size=4,
                          values_BxT=jnp.full((b, t), c), valid_B=jnp.ones(b))
    np.testing.assert_array_equal(np.asarray(compute_advantages("gae", inp).adv_BxT), 0.0)
  np.testing.assert_array_equal(np.asarray(masked_whiten(jnp.full((b, t), value),
                                                         jnp.asarray(mask))), 0.0)
  # Not constant: still the ordinary whitening (float64 reference).
  x = np.random.default_rng(2).normal(size=(b, t)).astype(np.float32)
  sel = mask > 0
  want = np.zeros((b, t))
  want[sel] = (x[sel] - x[sel].astype(np.float64).mean()) / (x[sel].astype(np.float64).std()
                                                             + 1e-6)
  np.testing.assert_allclose(np.asarray(masked_whiten(jnp.asarray(x), jnp.asarray(mask))), want,
                             **TOL)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dynamic_sampling_drops_constant_groups(dtype):
  # Float64 means of k equal values are off by an ulp for some k (seven 0.1s).
  for value in CONSTANTS:
    for k in range(2, 17):
      r = np.full((3, k), value, dtype)
      valid = np.ones((3, k))
      r[1, 0], valid[1, 0] = 0.0, 0      # an invalid member with another reward
      r[2, -1] = value + 0.5              # a real difference
      np.testing.assert_array_equal(groups_with_signal(r, valid), [False, False, True],
                                    err_msg=f"{value} x {k}")
  r = np.full((2, 7), 0.1)
  r[1, 0] = 1.0
  cand = {"rewards": r.reshape(-1), "row": np.arange(14)}
  filled = fill_groups([cand], 2, 7)
  assert filled.num_groups == 1 and not filled.complete
  np.testing.assert_array_equal(filled.arrays["row"], np.arange(7, 14))
