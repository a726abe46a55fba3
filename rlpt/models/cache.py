"""The decoder's key/value cache, its causal mask and attention over a cache layer.

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


class LayerKV(NamedTuple):
  """One layer's cache as stored: keys [B, K, H, S] and values [B, K, S, H] in
  the cache's dtype, and for an int8 cache their fp32 scales [B, K, S] (else
  None). Attention reads these directly: no widened copy of a cache exists."""

  k: jax.Array
  v: jax.Array
  k_scale: jax.Array | None = None
  v_scale: jax.Array | None = None

  @property
  def length(self) -> int:
    return self.v.shape[2]


def attention_with_lse(q_BxTxNxH, kv: LayerKV, mask_BxTxS,
                       scale: float | None = None) -> tuple[jax.Array, jax.Array]:
  """Softmax attention over a cache layer that also returns the log-sum-exp.

  Both products take their operands in the queries' dtype (the model's: bf16
  or fp32) and accumulate in fp32, as a flash kernel does: a bf16 cache is read
  as its two bytes a value, never widened to an fp32 copy. An int8 cache is
  read as its codes; its scales multiply the scores (keys) and the
  probabilities (values), which is the same sum as dequantizing first. The
  softmax is in fp32. Returns (out [B, T, N, H] fp32, normalised over the
  visible keys, lse [B, T, N]). A query that sees no key gets out 0 and lse
  -inf, so it drops out of a log-sum-exp merge (``merge_attention``).
  ``scale`` multiplies the scores (default head_dim**-0.5).
  """
  b, t, n, h = q_BxTxNxH.shape
  kh = kv.k.shape[1]
  g = n // kh
  dt = q_BxTxNxH.dtype if jnp.issubdtype(q_BxTxNxH.dtype, jnp.floating) else jnp.float32
  q = (q_BxTxNxH.astype(jnp.float32) * jnp.float32(h ** -0.5 if scale is None else scale))
  # A row's T queries and G grouped heads share their kv head's keys: one
  # [T*G, H] x [H, S] product per (row, kv head), a plain batched matmul.
  q = q.reshape(b, t, kh, g, h).transpose(0, 2, 1, 3, 4).reshape(b, kh, t * g, h).astype(dt)
  dot = lambda eq, x, y: jnp.einsum(eq, x, y.astype(dt), preferred_element_type=jnp.float32)
  scores = dot("bkqh,bkhs->bkqs", q, kv.k).reshape(b, kh, t, g, -1)
  if kv.k_scale is not None:
    scores = scores * kv.k_scale[:, :, None, None]
  scores = jnp.where(mask_BxTxS[:, None, :, None], scores, -jnp.inf)
  m = jnp.max(scores, axis=-1, keepdims=True)
  m = jnp.where(jnp.isfinite(m), m, 0.0)
  p = jnp.exp(scores - m)
  denom = jnp.sum(p, axis=-1, keepdims=True)
  p = p / jnp.where(denom == 0, 1.0, denom)
  lse = (m + jnp.log(denom))[..., 0]                          # [B, K, T, G]
  if kv.v_scale is not None:
    p = p * kv.v_scale[:, :, None, None]
  out = dot("bkqs,bksh->bkqh", p.astype(dt).reshape(b, kh, t * g, -1), kv.v)
  out = out.reshape(b, kh, t, g, h).transpose(0, 2, 1, 3, 4).reshape(b, t, n, h)
  return out, lse.transpose(0, 2, 1, 3).reshape(b, t, n)


def merge_attention(out_a, lse_a, out_b, lse_b) -> jax.Array:
  """Exact softmax over the union of two disjoint key sets from their partials
  (a query that sees neither set gets 0)."""
  m = jnp.maximum(lse_a, lse_b)
  m = jnp.where(jnp.isfinite(m), m, 0.0)
  wa, wb = jnp.exp(lse_a - m), jnp.exp(lse_b - m)
  total = wa + wb
  return (out_a * wa[..., None] + out_b * wb[..., None]) / jnp.where(total == 0, 1.0, total)[..., None]
