"""KL to the reference policy as a reward penalty, and its coefficient controllers.

Two places to put KL(pi || pi_ref):

* in the loss (``LossConfig.kl_beta`` / ``policy_objective(kl_coef=...)``): a
  differentiable penalty on the current policy's log-probs;
* in the reward (this module): the behaviour policy's per-token KL is a fixed
  reward shaping computed once per rollout, either per token for GAE
  (``kl_reward_penalty_BxT`` -> ``AdvantageInputs.token_rewards_BxT``) or
  summed per sequence for outcome-level estimators (``kl_penalized_rewards_B``).
  Set ``kl_beta=0`` in the loss then, or KL is counted twice.

The coefficient is a ``FixedKLController`` or an ``AdaptiveKLController``;
both are plain Python with a JSON-serialisable ``state_dict`` for checkpoints.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.rl.losses import kl_estimate
from rlpt.registry import KL_CONTROLLERS, lookup


def kl_reward_penalty_BxT(logp_BxT: jax.Array, ref_logp_BxT: jax.Array, mask_BxT: jax.Array,
                          beta: float | jax.Array, estimator: str = "k1") -> jax.Array:
  """Per-token reward -beta * KL_t on generated tokens, 0 elsewhere, [B, T].

  k1 (log pi - log pi_ref) is the classic choice (Ziegler et al. 2019): summed
  over the sequence it is an unbiased estimate of the sequence KL. No gradient
  flows: it is a reward.
  """
  kl = kl_estimate(estimator, logp_BxT, ref_logp_BxT) * mask_BxT.astype(jnp.float32)
  return jax.lax.stop_gradient(-beta * kl)


def sequence_kl_B(logp_BxT: jax.Array, ref_logp_BxT: jax.Array, mask_BxT: jax.Array,
                  estimator: str = "k1") -> jax.Array:
  """Sum over each sequence's generated tokens of the per-token KL estimate, [B] nats."""
  kl = kl_estimate(estimator, logp_BxT, ref_logp_BxT) * mask_BxT.astype(jnp.float32)
  return jax.lax.stop_gradient(kl.sum(axis=1))


def kl_penalized_rewards_B(rewards_B: jax.Array, logp_BxT: jax.Array, ref_logp_BxT: jax.Array,
                           mask_BxT: jax.Array, beta: float | jax.Array,
                           estimator: str = "k1") -> jax.Array:
  """Outcome rewards minus beta * sequence KL, [B]: KL in the reward for GRPO-style estimators."""
  return rewards_B.astype(jnp.float32) - beta * sequence_kl_B(logp_BxT, ref_logp_BxT, mask_BxT,
                                                              estimator)




@KL_CONTROLLERS.register("fixed")
class FixedKLController:
  """A constant coefficient; same interface as the adaptive one."""

  def __init__(self, init_kl_coef: float):
    if init_kl_coef < 0:
      raise ValueError(f"init_kl_coef must be >= 0, got {init_kl_coef}.")
    self.value = float(init_kl_coef)

  def update(self, current_kl: float, n_steps: int) -> float:
    del current_kl, n_steps
    return self.value

  def state_dict(self) -> dict:
    return {"value": self.value}

  def load_state_dict(self, state: dict) -> None:
    self.value = float(state["value"])


@KL_CONTROLLERS.register("adaptive")
class AdaptiveKLController:
  """Proportional controller of Ziegler et al. 2019 ("Fine-tuning LMs from human preferences").

  After each batch: e = clip(KL / target - 1, -0.2, 0.2), and
  beta <- beta * (1 + e * n_steps / horizon), where ``current_kl`` is the mean
  sequence KL in nats and ``n_steps`` the number of samples (or steps) the
  batch represents. The clip bounds how fast beta moves on a noisy estimate.
  """

  def __init__(self, init_kl_coef: float, target: float, horizon: float):
    if init_kl_coef <= 0:
      raise ValueError(f"init_kl_coef must be > 0 for the adaptive controller (it is scaled "
                       f"multiplicatively), got {init_kl_coef}.")
    if target <= 0:
      raise ValueError(f"target KL must be > 0 nats, got {target}.")
    if horizon <= 0:
      raise ValueError(f"horizon must be > 0, got {horizon}.")
    self.value = float(init_kl_coef)
    self.target = float(target)
    self.horizon = float(horizon)

  def update(self, current_kl: float, n_steps: int) -> float:
    error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
    self.value *= 1.0 + error * n_steps / self.horizon
    return self.value

  def state_dict(self) -> dict:
    return {"value": self.value, "target": self.target, "horizon": self.horizon}

  def load_state_dict(self, state: dict) -> None:
    self.value = float(state["value"])
    self.target = float(state["target"])
    self.horizon = float(state["horizon"])


def make_kl_controller(kind: str, init_kl_coef: float, target: float | None = None,
                       horizon: float | None = None):
  """``fixed`` (ignores target / horizon) or ``adaptive`` (needs both)."""
  cls = lookup(KL_CONTROLLERS, kind)
  if cls is AdaptiveKLController:
    if target is None or horizon is None:
      raise ValueError(f"KL controller 'adaptive' needs target and horizon, got target={target}, "
                       f"horizon={horizon}.")
    return cls(init_kl_coef, target, horizon)
  return cls(init_kl_coef)
