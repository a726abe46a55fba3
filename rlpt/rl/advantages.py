"""Advantage estimators: rewards (and values) -> per-sequence or per-token advantages."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from rlpt.rl.registry import Registry

ADVANTAGE_ESTIMATORS = Registry("advantage estimator")


@ADVANTAGE_ESTIMATORS.register("grpo")
def grpo_advantages(rewards_B: jax.Array, group_size: int, valid_B: jax.Array | None = None,
                    eps: float = 1e-6) -> jax.Array:
  """Group-normalised advantages (GRPO): (r - mean_group) / (std_group + eps).

  Rows are grouped as consecutive blocks of ``group_size`` samples of one
  prompt. ``valid_B`` masks samples whose reward is unknown (an environment
  infrastructure failure): they get advantage 0 and do not enter the
  statistics. The std is the population std over valid members.
  """
  b = rewards_B.shape[0]
  if b % group_size:
    raise ValueError(f"batch {b} is not a multiple of group_size {group_size}.")
  r = rewards_B.reshape(-1, group_size).astype(jnp.float32)
  w = (jnp.ones_like(r) if valid_B is None else valid_B.reshape(-1, group_size).astype(jnp.float32))
  n = jnp.maximum(w.sum(axis=1, keepdims=True), 1.0)
  mean = (r * w).sum(axis=1, keepdims=True) / n
  var = (((r - mean) ** 2) * w).sum(axis=1, keepdims=True) / n
  adv = (r - mean) / (jnp.sqrt(var) + eps) * w
  return adv.reshape(b)
