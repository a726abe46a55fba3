"""Decode over a KV cache sharded on the ``sequence`` axis, merged by log-sum-exp.

A million-token cache does not fit one device, and passing it around a ring
for every generated token would move the whole cache per step. Instead each
device attends its new queries (replicated, a few tokens) to its local cache
shard with the blockwise kernel (unwritten or out-of-window blocks are
skipped), and the partial results are merged across the axis with a max and
two psums:

  m = pmax(lse_d);  out = sum_d o_d * exp(lse_d - m) / sum_d exp(lse_d - m)

Communication per step is O(B * T * N * H), independent of the cache length.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh

from rlpt.attention.blockwise import BlockSpec, block_sizes, flash_forward, pad_axis1
from rlpt.attention.ring import activation_specs


def _local_decode(q_BxTxNxH, k_BxLxKxH, v_BxLxKxH, q_pos_BxT, kv_pos_BxL, kv_valid_BxL, *,
                  axis_name, block_size, window, num_sinks):
  b, t, n, h = q_BxTxNxH.shape
  l, kh = k_BxLxKxH.shape[1], k_BxLxKxH.shape[2]
  bq, bk = block_sizes(t, l, block_size)
  spec = BlockSpec(bq, bk, window, num_sinks, h ** -0.5)
  q = pad_axis1(q_BxTxNxH.reshape(b, t, kh, n // kh, h), bq, 0)
  o, lse = flash_forward(q, pad_axis1(k_BxLxKxH, bk, 0), pad_axis1(v_BxLxKxH, bk, 0),
                         pad_axis1(q_pos_BxT, bq), pad_axis1(kv_pos_BxL, bk),
                         pad_axis1(kv_valid_BxL, bk, False), spec)
  m = lax.pmax(lse, axis_name)
  w = jnp.exp(lse - jnp.where(jnp.isneginf(m), 0.0, m))
  num = lax.psum(o * w[..., None], axis_name)
  den = lax.psum(w, axis_name)
  out = num / jnp.where(den == 0.0, 1.0, den)[..., None]
  return out[:, :t].reshape(b, t, n, h).astype(q_BxTxNxH.dtype)


@functools.partial(jax.jit, static_argnames=("mesh", "axis_name", "window", "num_sinks",
                                             "block_size"))
def sharded_decode_attention(q_BxTxNxH, k_cache_BxSxKxH, v_cache_BxSxKxH, *, q_positions,
                             kv_positions, kv_valid=None, mesh: Mesh,
                             axis_name: str = "sequence", window: int | None = None,
                             num_sinks: int = 0, block_size: int = 512) -> jax.Array:
  """Attention of a few new queries to a cache sharded on S over ``axis_name``.

  q [B, T, N, H] (T = 1 for plain decoding) with positions [B, T]; the cache
  [B, S, K, H] with kv_positions / kv_valid [B, S] (kv_valid False on slots
  not written yet), S a multiple of the axis size. Returns [B, T, N, H],
  replicated over ``axis_name``.
  """
  n = mesh.shape[axis_name]
  b, s = kv_positions.shape
  if s % n:
    raise ValueError(f"cache length ({s}) must be divisible by the '{axis_name}' axis size ({n}).")
  if kv_valid is None:
    kv_valid = jnp.ones((b, s), bool)
  q_spec, qpos_spec = activation_specs(mesh, b, k_cache_BxSxKxH.shape[2], None)
  kv_spec, kvpos_spec = activation_specs(mesh, b, k_cache_BxSxKxH.shape[2], axis_name)
  body = functools.partial(_local_decode, axis_name=axis_name, block_size=block_size,
                           window=window, num_sinks=num_sinks)
  fn = jax.shard_map(body, mesh=mesh,
                     in_specs=(q_spec, kv_spec, kv_spec, qpos_spec, kvpos_spec, kvpos_spec),
                     out_specs=q_spec, check_vma=False)
  return fn(q_BxTxNxH, k_cache_BxSxKxH, v_cache_BxSxKxH, q_positions, kv_positions, kv_valid)
