"""Dense fp32 attention with positions-based masking: the oracle for every kernel.

Masking is by true token positions, never by array index, so the same rule
holds for a contiguous sequence, a zigzag ring layout, a ragged batch or a KV
cache. A query at position p sees a key at position s iff

  s <= p                                   (causal)
  and (window is None or p - s < window    (sliding window, the key itself
       or s < num_sinks)                    counts, so `window` keys at most;
                                            the first num_sinks positions stay
                                            visible: attention sinks)
  and kv_valid[s]                          (ragged lengths, unwritten cache)

A query that sees no key at all returns zeros (and zero gradient), not the
uniform average that a finite mask value would give.

Shape suffixes: B batch, T queries, S keys, N query heads, K kv heads,
G = N // K, H head_dim.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp


def attention_mask(q_positions_BxT: jax.Array, kv_positions_BxS: jax.Array,
                   kv_valid_BxS: jax.Array | None = None, window: int | None = None,
                   num_sinks: int = 0) -> jax.Array:
  """[B, T, S] boolean mask from positions (see the module docstring for the rule)."""
  q = q_positions_BxT[:, :, None]
  s = kv_positions_BxS[:, None, :]
  mask = s <= q
  if window is not None:
    near = q - s < window
    if num_sinks:
      near |= s < num_sinks
    mask &= near
  if kv_valid_BxS is not None:
    mask &= kv_valid_BxS[:, None, :]
  return mask


@functools.partial(jax.jit, static_argnames=("window", "num_sinks"))
def reference_attention_with_lse(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, *, q_positions,
                                 kv_positions, kv_valid=None, window=None, num_sinks=0):
  """Dense attention in fp32. Returns (out [B, T, N, H] fp32, lse [B, T, N] fp32).

  ``lse`` is the log-sum-exp of the scaled logits over visible keys, -inf for
  a query that sees nothing; partial results over disjoint key sets merge
  exactly through it (ring attention, sharded decode).
  """
  b, t, n, h = q_BxTxNxH.shape
  kh = k_BxSxKxH.shape[2]
  q = q_BxTxNxH.reshape(b, t, kh, n // kh, h).astype(jnp.float32)
  k = k_BxSxKxH.astype(jnp.float32)
  v = v_BxSxKxH.astype(jnp.float32)
  hi = jax.lax.Precision.HIGHEST
  s_BxKxGxTxS = jnp.einsum("btkgh,bskh->bkgts", q, k, precision=hi) * h ** -0.5
  mask = attention_mask(q_positions, kv_positions, kv_valid, window, num_sinks)[:, None, None]
  # Rows that see nothing get finite dummy logits, so logsumexp and its
  # gradient stay finite; their probabilities are then zeroed by the mask.
  any_B1x1xTx1 = jnp.any(mask, axis=-1, keepdims=True)
  s_BxKxGxTxS = jnp.where(mask, s_BxKxGxTxS, jnp.where(any_B1x1xTx1, -jnp.inf, 0.0))
  lse_BxKxGxT = jax.nn.logsumexp(s_BxKxGxTxS, axis=-1)
  p = jnp.where(mask, jnp.exp(s_BxKxGxTxS - lse_BxKxGxT[..., None]), 0.0)
  lse_BxKxGxT = jnp.where(any_B1x1xTx1[..., 0], lse_BxKxGxT, -jnp.inf)
  out = jnp.einsum("bkgts,bskh->btkgh", p, v, precision=hi).reshape(b, t, n, h)
  lse = jnp.moveaxis(lse_BxKxGxT, 3, 1).reshape(b, t, n)
  return out, lse


@functools.partial(jax.jit, static_argnames=("window", "num_sinks"))
def reference_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, *, q_positions, kv_positions,
                        kv_valid=None, window=None, num_sinks=0) -> jax.Array:
  """Dense attention in fp32, [B, T, N, H] in q's dtype. O(T * S) memory."""
  out, _ = reference_attention_with_lse(
      q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, q_positions=q_positions, kv_positions=kv_positions,
      kv_valid=kv_valid, window=window, num_sinks=num_sinks)
  return out.astype(q_BxTxNxH.dtype)
