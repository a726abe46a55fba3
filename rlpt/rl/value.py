"""The value-model (critic) objective of PPO with GAE.

Shapes as in ``losses``: values, old values and returns are [B, T] in the
loss layout (position t holds V of the state before generated token t+1),
``mask_BxT`` is 1 on generated tokens. Returns come from
``compute_advantages('gae', ...)``.
"""

from __future__ import annotations


import jax
import jax.numpy as jnp

from rlpt.rl.losses import aggregate
from rlpt.config.losses import ValueLossConfig


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
