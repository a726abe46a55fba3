"""The value-model (critic) objective of PPO with GAE.

Shapes as in ``losses``: values, old values and returns are [B, T] in the
loss layout (position t holds V of the state before generated token t+1),
``mask_BxT`` is 1 on generated tokens. Returns come from
``compute_advantages('gae', ...)``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rlpt.rl.losses import AGGREGATIONS, aggregate
from rlpt.rl.registry import lookup


@dataclasses.dataclass(frozen=True)
class ValueLossConfig:
  """Hyperparameters of the value objective (static in the jitted step).

  value_clip: eps_v of the clipped value loss; None disables clipping. Unlike
    the policy's ratio clip it is in reward units, so it depends on the reward
    scale.
  aggregation: one of ``AGGREGATIONS``, normalised by global counts.
  norm_len: fixed length for ``seq-mean-token-sum-norm`` (None: T).
  """

  value_clip: float | None = 0.2
  aggregation: str = "token-mean"
  norm_len: int | None = None

  def __post_init__(self):
    lookup(AGGREGATIONS, self.aggregation)
    if self.value_clip is not None and not self.value_clip > 0:
      raise ValueError(f"value_clip must be > 0 (or None to disable), got {self.value_clip}.")
    if self.norm_len is not None and self.norm_len < 1:
      raise ValueError(f"norm_len must be >= 1 (or None for T), got {self.norm_len}.")


def value_objective(values_BxT, old_values_BxT, returns_BxT, mask_BxT, cfg: ValueLossConfig,
                    num_tokens=None, num_seqs=None):
  """Clipped value loss 0.5 * max((v - R)^2, (v_old + clip(v - v_old, +-eps) - R)^2).

  The clip keeps one update from moving V far from the values the advantages
  were computed with. ``old_values_BxT`` and ``returns_BxT`` are targets (no
  gradient). Returns (loss, metrics).
  """
  mask = mask_BxT.astype(jnp.float32)
  v = values_BxT.astype(jnp.float32)
  old = jax.lax.stop_gradient(old_values_BxT.astype(jnp.float32))
  ret = jax.lax.stop_gradient(returns_BxT.astype(jnp.float32))
  unclipped = (v - ret) ** 2
  if cfg.value_clip is None:
    loss_BxT = 0.5 * unclipped
    clip_frac = jnp.zeros_like(unclipped)
  else:
    v_clipped = old + jnp.clip(v - old, -cfg.value_clip, cfg.value_clip)
    clipped = (v_clipped - ret) ** 2
    loss_BxT = 0.5 * jnp.maximum(unclipped, clipped)
    clip_frac = (clipped > unclipped).astype(jnp.float32)

  def agg(x):
    return aggregate(cfg.aggregation, x, mask, num_tokens, num_seqs, cfg.norm_len)

  loss = agg(loss_BxT)
  metrics = {
      "value_loss": loss,
      "value_clip_frac": agg(clip_frac),
      "value_mean": agg(v),
      "value_abs_error": agg(jnp.abs(v - ret)),
  }
  return loss, metrics
