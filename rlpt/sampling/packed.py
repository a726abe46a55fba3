"""Packed prefill: several sequences' first tokens back to back in one row.

A prefill call of A rows x C tokens over *fresh* sequences (nothing cached
before their first token) need not give each sequence a row of its own: a
row holds as many whole first chunks as fit, each token tagged with the store
row it is cached into and its position there. A token attends to the earlier
tokens of its own sequence in the same call row (nothing else is cached
before them) and its key and value are written to (its store row, its
position). Prompts shorter than C then fill the call instead of padding it.

The keys and values a token attends to are those a read of the store would
return (int8 quantized and back, or cast to the store's dtype), so a packed
chunk caches and attends exactly as the row-per-sequence prefill
(``rlpt.sampling.slots.prefill_rows``) does, up to summation order.

Shape suffixes: A call rows, C tokens a row, N tokens (A x C), K kv heads,
H head_dim.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlpt.models.cache import LayerKV, attention_with_lse
from rlpt.sampling.fast import AnyKV, cached_forward
from rlpt.sampling.quant import Int8KVCache, as_params, dequantize_kv, quantize_kv


class Packed(NamedTuple):
  """Call rows of packed tokens over ``store``: ``row_AxC`` is each token's
  store row (>= the store's rows: padding, written nowhere)."""

  store: AnyKV
  row_AxC: jax.Array


def as_stored(store: AnyKV, x_AxCxKxH: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
  """Keys or values as ``store`` holds them (int8 codes and scales, or the
  store's dtype), and as a read of it returns them (fp32): quantized once."""
  if isinstance(store, Int8KVCache):
    q, scale = quantize_kv(x_AxCxKxH)
    return (q, scale), dequantize_kv(q, scale)
  x = x_AxCxKxH.astype(store.k[0].dtype)
  return (x,), x.astype(jnp.float32)


def write_tokens(store: AnyKV, layer: int, k_held: tuple[jax.Array, ...],
                 v_held: tuple[jax.Array, ...], row_AxC: jax.Array,
                 position_AxC: jax.Array) -> AnyKV:
  """Each token's key and value (as ``as_stored`` holds them) written at (its
  row, its position) of one layer (keys [R, K, H, L], values [R, K, L, H],
  int8 scales [R, K, L]); rows out of range are dropped."""
  row, pos = row_AxC.reshape(-1), position_AxC.reshape(-1)

  def put(bufs, new, axis):
    index = [row, slice(None), slice(None), slice(None)][:bufs[layer].ndim]
    index[axis] = pos
    new = new.reshape((-1,) + new.shape[2:])
    return bufs[:layer] + (bufs[layer].at[tuple(index)].set(new, mode="drop"),) + bufs[layer + 1:]

  if isinstance(store, Int8KVCache):
    (kq, ks), (vq, vs) = k_held, v_held
    return Int8KVCache(put(store.k, kq, 3), put(store.v, vq, 2), put(store.k_scale, ks, 2),
                       put(store.v_scale, vs, 2))
  return type(store)(put(store.k, k_held[0], 3), put(store.v, v_held[0], 2))


@dataclasses.dataclass(frozen=True)
class PackedLayout:
  """Cache layout of a packed prefill (``Packed``): attention within each
  sequence's tokens of the call row, keys and values scattered to the store."""

  def attend(self, cache: Packed, layer, q_AxCxNxH, k_AxCxKxH, v_AxCxKxH, positions_AxC):
    row = cache.row_AxC
    mask_AxCxC = ((row[:, None, :] == row[:, :, None])
                  & (positions_AxC[:, None, :] <= positions_AxC[:, :, None]))
    k_held, k = as_stored(cache.store, k_AxCxKxH)
    v_held, v = as_stored(cache.store, v_AxCxKxH)
    out, _ = attention_with_lse(q_AxCxNxH, LayerKV(jnp.transpose(k, (0, 2, 3, 1)),
                                                   jnp.transpose(v, (0, 2, 1, 3))), mask_AxCxC)
    store = write_tokens(cache.store, layer, k_held, v_held, row, positions_AxC)
    return out, cache._replace(store=store)


def prefill_packed(graphdef: nnx.GraphDef, params, store: AnyKV, row_AxC: jax.Array,
                   tokens_AxC: jax.Array, position_AxC: jax.Array) -> AnyKV:
  """Caches packed first chunks: token (a, c) at position ``position_AxC[a, c]``
  of store row ``row_AxC[a, c]`` (out of range: padding). A sequence's tokens
  lie in one call row, in order, and start at position 0."""
  _, packed = cached_forward(graphdef, as_params(params), tokens_AxC, position_AxC,
                             Packed(store, row_AxC), PackedLayout(), with_logits=False)
  return packed.store
