"""RoPE frequencies for contexts longer than the model was trained on.

Two published schemes, both a change of the per-pair rotation frequencies only:

- "linear" (position interpolation, Chen et al. 2023): every frequency is
  divided by ``factor``, i.e. position p is rotated as position p / factor, so
  a context ``factor`` times longer maps onto the trained range of angles.
- "llama3" (the Llama 3.1 recipe): high-frequency pairs (wavelength shorter
  than original_max_position / high_freq_factor), which encode local order,
  are kept; low-frequency pairs (wavelength longer than
  original_max_position / low_freq_factor) are interpolated by ``factor``; the
  band in between is blended linearly in 1 / wavelength.

The rotation itself (``apply_rope_with_frequencies``) uses the same
rotate-halves layout as ``rlpt.models.transformer.apply_rope``, so with
``RopeScaling()`` (kind "none") the two agree exactly.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from rlpt.config.model import RopeScaling

def rope_frequencies(head_dim: int, theta: float,
                     scaling: RopeScaling | None = None) -> jax.Array:
  """[head_dim // 2] fp32 angular frequencies (radians per position), scaled."""
  if head_dim % 2:
    raise ValueError(f"RoPE needs an even head_dim, got {head_dim}.")
  freq_H2 = theta ** (-jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim)
  if scaling is None or scaling.kind == "none":
    return freq_H2
  if scaling.kind == "linear":
    return freq_H2 / scaling.factor
  orig = scaling.original_max_position
  wavelen = 2 * math.pi / freq_H2
  smooth = (orig / wavelen - scaling.low_freq_factor) / (
      scaling.high_freq_factor - scaling.low_freq_factor)
  blended = (1 - smooth) * freq_H2 / scaling.factor + smooth * freq_H2
  out = jnp.where(wavelen > orig / scaling.low_freq_factor, freq_H2 / scaling.factor, blended)
  return jnp.where(wavelen < orig / scaling.high_freq_factor, freq_H2, out)


def apply_rope_with_frequencies(x_BxTxNxH: jax.Array, positions_BxT: jax.Array,
                                freq_H2: jax.Array) -> jax.Array:
  """Rotary embedding with given frequencies (rotate-halves / Llama layout)."""
  angle_BxTxH2 = positions_BxT[..., None].astype(jnp.float32) * freq_H2
  sin = jnp.sin(angle_BxTxH2)[:, :, None, :]
  cos = jnp.cos(angle_BxTxH2)[:, :, None, :]
  x = x_BxTxNxH.astype(jnp.float32)
  x1, x2 = jnp.split(x, 2, axis=-1)
  out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
  return out.astype(x_BxTxNxH.dtype)
