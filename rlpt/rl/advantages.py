"""Advantage estimators: rewards (and values) -> per-sequence or per-token advantages.

Two calling conventions:

* Every registered estimator is callable as ``fn(rewards_B, group_size, valid_B)``
  (the trainer's historical call); the outcome-level ones return ``adv_B``.
  ``gae`` additionally needs the value model's ``values_BxT`` and the
  completion ``mask_BxT`` as keyword arguments and returns ``adv_BxT``.
* ``compute_advantages(name, AdvantageInputs(...))`` is the uniform entry point
  for all of them: it returns ``Advantages(adv_BxT, returns_BxT)`` with the
  advantage laid out per token (zero off the mask) and, for value-based
  estimators, the value targets.

Rows are grouped as consecutive blocks of ``group_size`` samples of one
prompt. ``valid_B`` masks samples whose reward is unknown (an environment
infrastructure failure): they get advantage 0 and enter no statistic.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rlpt.registry import ADVANTAGE_ESTIMATORS, lookup


# Facts recorded where each estimator is registered:
#   group_baseline: its advantages are relative to the group (needs group_size >= 2);
#   with_returns: it needs a value model, and this function gives (adv_BxT, returns_BxT)
#     from AdvantageInputs' fields; the trainer builds a critic only for these.
# (rlpt.registry.is_group_baseline and needs_value_model read them.)


def _grouped(rewards_B, group_size, valid_B):
  """[G, K] rewards and validity weights (float32)."""
  b = rewards_B.shape[0]
  if group_size < 1 or b % group_size:
    raise ValueError(f"batch {b} is not a multiple of group_size {group_size}.")
  r = rewards_B.reshape(-1, group_size).astype(jnp.float32)
  w = (jnp.ones_like(r) if valid_B is None else valid_B.reshape(-1, group_size).astype(jnp.float32))
  return r, w


def _deviations(x_GxK, w_GxK):
  """Deviations from the weighted mean along K and the population variance.

  Returns (dev_GxK, var_Gx1); dev is not masked (the callers multiply by w).
  Each row is first shifted by its first valid member, so members equal to it
  become exact zeros: a row whose valid values are all equal gets deviations
  and variance of exactly 0. Without the shift the float32 mean of eight 0.7s
  is off by 6e-8, which a division by (std + eps) turns into an advantage of
  0.056 for a prompt that carries no signal. Otherwise the result equals the
  unshifted formula up to rounding (the shift only improves conditioning).
  Invalid members (w == 0) enter no statistic, whatever their value (NaN too).
  """
  valid = w_GxK > 0
  first_Gx1 = jnp.argmax(valid, axis=1, keepdims=True)
  ref_Gx1 = jnp.take_along_axis(x_GxK, first_Gx1, axis=1)
  d = jnp.where(valid, x_GxK - ref_Gx1, 0.0)
  n = jnp.maximum(w_GxK.sum(axis=1, keepdims=True), 1.0)
  dev = d - (d * w_GxK).sum(axis=1, keepdims=True) / n
  var = (jnp.where(valid, dev, 0.0) ** 2 * w_GxK).sum(axis=1, keepdims=True) / n
  return dev, var


def _batch_normalise(x_B, w_B, eps, centre: bool = True):
  """(x - mean) / (std + eps) over the valid entries (population std), 0 elsewhere.

  ``centre=False`` only scales, for inputs whose mean is 0 by construction:
  an entry of 0 then stays exactly 0.
  """
  x, w = x_B[None], w_B[None]
  if centre:
    dev, var = _deviations(x, w)
  else:
    dev = jnp.where(w > 0, x, 0.0)
    var = (dev ** 2 * w).sum() / jnp.maximum(w.sum(), 1.0)
  return (dev / (jnp.sqrt(var) + eps) * w)[0]


@ADVANTAGE_ESTIMATORS.register("grpo", group_baseline=True)
def grpo_advantages(rewards_B: jax.Array, group_size: int, valid_B: jax.Array | None = None,
                    eps: float = 1e-6) -> jax.Array:
  """Group-normalised advantages (GRPO): (r - mean_group) / (std_group + eps), [B].

  The std is the population std over valid members.
  """
  r, w = _grouped(rewards_B, group_size, valid_B)
  dev, var = _deviations(r, w)
  adv = dev / (jnp.sqrt(var) + eps) * w
  return adv.reshape(rewards_B.shape[0])


@ADVANTAGE_ESTIMATORS.register("dr_grpo", group_baseline=True)
def dr_grpo_advantages(rewards_B: jax.Array, group_size: int,
                       valid_B: jax.Array | None = None) -> jax.Array:
  """Dr. GRPO (Liu et al. 2025): r - mean_group, no std division, [B].

  Dividing by the group std up-weights near-solved and near-hopeless prompts
  (small std); Dr. GRPO drops it so every prompt's reward scale is kept.
  """
  r, w = _grouped(rewards_B, group_size, valid_B)
  dev, _ = _deviations(r, w)
  return (dev * w).reshape(rewards_B.shape[0])


@ADVANTAGE_ESTIMATORS.register("rloo", group_baseline=True)
def rloo_advantages(rewards_B: jax.Array, group_size: int,
                    valid_B: jax.Array | None = None) -> jax.Array:
  """REINFORCE leave-one-out (Ahmadian et al. 2024): r_i - mean_{j != i} r_j, [B].

  The mean runs over the other valid members of the group; a member with no
  valid peer has no baseline and gets advantage 0 (an unbiased estimate needs
  the baseline to be independent of the sample). Computed as
  n / (n - 1) * (r_i - mean) over the n valid members (the same quantity), so
  a group of equal rewards gets exactly 0 (see ``_deviations``).
  """
  r, w = _grouped(rewards_B, group_size, valid_B)
  n = w.sum(axis=1, keepdims=True)
  dev, _ = _deviations(r, w)
  adv = dev * (n / jnp.maximum(n - 1.0, 1.0)) * w * (n > 1.0)
  return adv.reshape(rewards_B.shape[0])


@ADVANTAGE_ESTIMATORS.register("reinforce_pp")
def reinforce_pp_advantages(rewards_B: jax.Array, group_size: int,
                            valid_B: jax.Array | None = None, eps: float = 1e-6) -> jax.Array:
  """REINFORCE++ (Hu 2025) with outcome rewards: batch-normalised rewards, [B].

  The baseline and scale are the mean and std over the whole batch (all
  prompts), not per group. OpenRLHF whitens over tokens, which weights long
  answers more; with one outcome reward per sequence we normalise over
  sequences so each answer counts once. ``group_size`` only checks the layout.
  """
  r, w = _grouped(rewards_B, group_size, valid_B)
  return _batch_normalise(r.reshape(-1), w.reshape(-1), eps)


@ADVANTAGE_ESTIMATORS.register("reinforce_pp_baseline", group_baseline=True)
def reinforce_pp_baseline_advantages(rewards_B: jax.Array, group_size: int,
                                     valid_B: jax.Array | None = None,
                                     eps: float = 1e-6) -> jax.Array:
  """REINFORCE++ with baseline: r - mean_group, then normalised over the batch, [B].

  The group mean removes the prompt's difficulty; the batch std (rather than
  each group's, as in GRPO) keeps the relative scale between prompts. The
  group-centred rewards have batch mean 0 already (each group's valid
  deviations sum to 0), so the batch step only scales: re-centring on a
  float32 mean of ~1e-9 would move a constant group's exact 0 off zero.
  """
  r, w = _grouped(rewards_B, group_size, valid_B)
  dev, _ = _deviations(r, w)
  return _batch_normalise((dev * w).reshape(-1), w.reshape(-1), eps, centre=False)


def terminal_rewards_BxT(rewards_B: jax.Array, mask_BxT: jax.Array) -> jax.Array:
  """Places each sequence's reward on its last masked (generated) token, [B, T].

  Rows with an empty mask get no reward.
  """
  t = mask_BxT.shape[1]
  m = mask_BxT > 0
  last_T = t - 1 - jnp.argmax(m[:, ::-1], axis=1)
  has_any = m.any(axis=1)
  onehot = jax.nn.one_hot(last_T, t, dtype=jnp.float32)
  return onehot * (rewards_B.astype(jnp.float32) * has_any)[:, None]


def gae_BxT(token_rewards_BxT: jax.Array, values_BxT: jax.Array, mask_BxT: jax.Array,
            gamma: float, lam: float) -> tuple[jax.Array, jax.Array]:
  """Generalised advantage estimation (Schulman et al. 2016) over masked tokens.

  token_rewards_BxT: per-token rewards (the terminal reward on the last
    generated token plus any per-token shaping such as a KL penalty).
  values_BxT: value-model estimates V(s_t) at the same positions.
  mask_BxT: 1 on generated tokens. Unmasked positions (the prompt, padding,
    environment tokens between turns) are skipped: the recursion links each
    generated token to the next generated token, and the value after the last
    one is 0 (the episode ends there).

  Returns (advantages [B, T], returns [B, T] = advantages + values), both 0 off
  the mask. Runs a reverse ``lax.scan`` over T.
  """
  m = mask_BxT.astype(jnp.float32)
  r = token_rewards_BxT.astype(jnp.float32) * m
  v = values_BxT.astype(jnp.float32) * m
  b = r.shape[0]

  def step(carry, x):
    next_value, next_adv = carry
    r_B, v_B, m_B = x
    delta = r_B + gamma * next_value - v_B
    adv = delta + gamma * lam * next_adv
    on = m_B > 0
    return (jnp.where(on, v_B, next_value), jnp.where(on, adv, next_adv)), adv * m_B

  zeros = jnp.zeros((b,), jnp.float32)
  _, adv_TxB = jax.lax.scan(step, (zeros, zeros), (r.T, v.T, m.T), reverse=True)
  adv = adv_TxB.T
  return adv, (adv + v) * m


def masked_whiten(x_BxT: jax.Array, mask_BxT: jax.Array, eps: float = 1e-6) -> jax.Array:
  """(x - mean) / (std + eps) over masked entries (population std), 0 off the mask.

  Equal masked entries give exactly 0 (see ``_deviations``).
  """
  m = mask_BxT.astype(jnp.float32)
  return _batch_normalise(x_BxT.astype(jnp.float32).reshape(-1), m.reshape(-1),
                          eps).reshape(x_BxT.shape)


def gae_advantages_and_returns(rewards_B: jax.Array, values_BxT: jax.Array, mask_BxT: jax.Array,
                               valid_B: jax.Array | None = None, gamma: float = 1.0,
                               lam: float = 1.0, token_rewards_BxT: jax.Array | None = None,
                               whiten: bool = True) -> tuple[jax.Array, jax.Array]:
  """GAE from an outcome reward: (advantages [B, T], value targets [B, T]).

  The outcome reward goes on the last generated token; ``token_rewards_BxT``
  (e.g. ``kl_reward_penalty_BxT``) is added on every token. Invalid rows get
  a zero mask. With ``whiten`` the advantages are normalised over all masked
  tokens of the batch (standard PPO); the returns are not.
  """
  m = mask_BxT.astype(jnp.float32)
  if valid_B is not None:
    m = m * valid_B.astype(jnp.float32)[:, None]
  r = terminal_rewards_BxT(rewards_B, m)
  if token_rewards_BxT is not None:
    r = r + token_rewards_BxT.astype(jnp.float32)
  adv, ret = gae_BxT(r, values_BxT, m, gamma, lam)
  if whiten:
    adv = masked_whiten(adv, m)
  return adv, ret


@ADVANTAGE_ESTIMATORS.register("gae", with_returns=gae_advantages_and_returns)
def gae_advantages(rewards_B: jax.Array, group_size: int, valid_B: jax.Array | None = None, *,
                   values_BxT: jax.Array | None = None, mask_BxT: jax.Array | None = None,
                   gamma: float = 1.0, lam: float = 1.0,
                   token_rewards_BxT: jax.Array | None = None, whiten: bool = True) -> jax.Array:
  """Per-token GAE advantages [B, T] (PPO with a value model).

  ``group_size`` is unused (GAE needs no groups); it is accepted so every
  estimator shares the ``(rewards_B, group_size, valid_B)`` convention.
  """
  if values_BxT is None or mask_BxT is None:
    raise ValueError("advantage estimator 'gae' needs values_BxT (the value model's per-token "
                     "values) and mask_BxT; call compute_advantages('gae', AdvantageInputs(...)).")
  del group_size
  return gae_advantages_and_returns(rewards_B, values_BxT, mask_BxT, valid_B, gamma, lam,
                                    token_rewards_BxT, whiten)[0]


class AdvantageInputs(NamedTuple):
  """Everything any estimator may read; the outcome-level ones ignore the value fields.

  rewards_B: one outcome reward per sequence.
  mask_BxT: 1 on generated (trained) tokens, in the loss layout.
  group_size: consecutive samples per prompt.
  valid_B: 0 where the reward is unknown; None means all valid.
  values_BxT: value-model estimates (required by value-based estimators).
  token_rewards_BxT: per-token reward shaping added before GAE (KL in the reward).
  gamma, lam: GAE discount and trace decay.
  whiten: normalise GAE advantages over the batch's tokens.
  """

  rewards_B: jax.Array
  mask_BxT: jax.Array
  group_size: int = 1
  valid_B: jax.Array | None = None
  values_BxT: jax.Array | None = None
  token_rewards_BxT: jax.Array | None = None
  gamma: float = 1.0
  lam: float = 1.0
  whiten: bool = True


class Advantages(NamedTuple):
  """adv_BxT: advantages per token, 0 off the mask and on invalid rows.
  returns_BxT: value-model targets, or None for estimators without a value model.
  """

  adv_BxT: jax.Array
  returns_BxT: jax.Array | None


def compute_advantages(name: str, inp: AdvantageInputs) -> Advantages:
  """The uniform entry point: per-token advantages (and value targets) for any estimator.

  For outcome-level estimators, ``token_rewards_BxT`` (if given) is summed per
  sequence and added to the outcome reward first, so "KL in the reward" works
  with every estimator.
  """
  fn = lookup(ADVANTAGE_ESTIMATORS, name)
  m = inp.mask_BxT.astype(jnp.float32)
  if inp.valid_B is not None:
    m = m * inp.valid_B.astype(jnp.float32)[:, None]
  with_returns = ADVANTAGE_ESTIMATORS.fact(name, "with_returns")
  if with_returns is not None:
    if inp.values_BxT is None:
      raise ValueError(f"advantage estimator '{name}' needs AdvantageInputs.values_BxT "
                       "(per-token values from the value model); got None.")
    adv, ret = with_returns(inp.rewards_B, inp.values_BxT, inp.mask_BxT, inp.valid_B, inp.gamma,
                            inp.lam, inp.token_rewards_BxT, inp.whiten)
    return Advantages(adv, ret)
  rewards = inp.rewards_B.astype(jnp.float32)
  if inp.token_rewards_BxT is not None:
    rewards = rewards + (inp.token_rewards_BxT.astype(jnp.float32) * m).sum(axis=1)
  adv_B = fn(rewards, inp.group_size, inp.valid_B)
  return Advantages(adv_B[:, None] * m, None)
