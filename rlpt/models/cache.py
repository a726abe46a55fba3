"""The decoder's key/value cache and its causal mask.

Shape suffixes as in rlpt.models.transformer: B batch, T query length, S key
length, K kv heads, H head_dim.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rlpt.config.model import ModelConfig


class KVCache(NamedTuple):
  """Key/value buffers, one array per layer: keys [B, K, H, S], values [B, K, S, H].

  Kv-head major and keys transposed, so both products of a decode step are
  plain matmuls over each head's contiguous cache (q [G, H] @ k [H, S], then
  p [G, S] @ v [S, H]); a [B, S, K, H] buffer costs XLA on CPU a transposed
  copy of the cache per layer per step, and [B, K, S, H] keys a repacking.
  One array per layer, so a step updates each in place (slicing a layer out of
  a stacked [L, ...] buffer and writing it back copies it).
  """

  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]

  @property
  def length(self) -> int:
    return self.v[0].shape[2]


def init_cache(cfg: ModelConfig, batch: int, length: int) -> KVCache:
  b, k, h, dt, n = batch, cfg.num_kv_heads, cfg.head_dim, cfg.jnp_dtype, cfg.num_layers
  return KVCache(tuple(jnp.zeros((b, k, h, length), dt) for _ in range(n)),
                 tuple(jnp.zeros((b, k, length, h), dt) for _ in range(n)))


def write_kv(cache: jax.Array, new_BxTxKxH: jax.Array, index, keys: bool = False) -> jax.Array:
  """Writes each row's T new values (``keys``: keys) at slot ``index``.

  ``cache`` is one layer: [B, K, S, H] values or, with ``keys``, [B, K, H, S].
  ``index``: each row's slot [B] (one scatter), or a scalar: the same slot for
  every row, one dynamic-update-slice, which every backend does in place and
  XLA's cost model counts as the bytes written (a scatter it counts as a read
  and a write of the whole buffer).
  """
  axes, slot = ((0, 2, 3, 1), 2) if keys else ((0, 2, 1, 3), 1)
  new = jnp.transpose(new_BxTxKxH, axes).astype(cache.dtype)
  if jnp.ndim(index) == 0:
    return jax.lax.dynamic_update_slice_in_dim(cache, new, index, axis=slot + 1)
  row = lambda c, u, i: jax.lax.dynamic_update_slice_in_dim(c, u, i, axis=slot)
  return jax.vmap(row)(cache, new, index)


def causal_mask(positions_BxT: jax.Array, key_positions_BxS: jax.Array,
                key_valid_BxS: jax.Array | None = None) -> jax.Array:
  """[B, T, S] boolean mask: query at position p sees keys at positions <= p."""
  mask = key_positions_BxS[:, None, :] <= positions_BxT[:, :, None]
  if key_valid_BxS is not None:
    mask &= key_valid_BxS[:, None, :]
  return mask
