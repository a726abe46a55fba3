"""int8 weights and an int8 KV cache for the sampler.

Weights: weight-only int8 with one fp32 scale per output channel (symmetric,
``scale = max|w| / 127`` over the contraction axes). ``quantize_params`` runs
after each weight handoff on the sampler's copy; the sampler dequantizes
inside its jitted program (``as_params``), so the copy kept between rollouts
is ~4x smaller (1 byte per weight plus one fp32 per output channel; the
1-D RMSNorm scales stay fp32). During a generate call XLA holds one fp32
copy as a temporary: on CPU that is cheaper than dequantizing inside every
decode step. A fused int8 matmul (GPU/TPU) would remove the temporary too;
the numerics here are the same as such a kernel's (int8 * scale, fp32 math).

KV cache: int8 keys and values with one fp32 scale per (token, kv head), so
a cache entry costs H + 4 bytes instead of 4 H (H = head_dim; 3.6x smaller
at H = 32). Keys are quantized after RoPE, exactly the vectors the fp32
cache would hold.

Shape suffixes: L layers, B rows, S cache slots, K kv heads, H head_dim.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlpt.models import ModelConfig

# Contraction axes of each weight (the ones a scale is shared over); every
# other axis is an output channel. embed is [V, D]: a lookup table and (tied)
# the output head "btd,vd->btv", so its output channel is the row.
_REDUCE_AXES = {"wq": (0,), "wk": (0,), "wv": (0,), "wo": (0, 1), "w_gate": (0,),
                "w_up": (0,), "w_down": (0,), "embed": (1,), "lm_head": (0,)}


class QuantizedState(NamedTuple):
  """A policy's parameters with its matrices in int8.

  values: the params' tree; the matrices in ``_REDUCE_AXES`` hold int8, every
    other leaf (norm scales) its original fp32 array.
  scales: the same tree; per-output-channel fp32 scales for int8 leaves (size
    1 on the contraction axes, so ``values * scales`` broadcasts), a scalar 1
    elsewhere.
  """

  values: nnx.State
  scales: nnx.State


def _leaf_name(path) -> str:
  names = [k.key for k in path if isinstance(k, jax.tree_util.DictKey)]
  return str(names[-1]) if names else ""


def quantize_params(params: nnx.State) -> QuantizedState:
  """Per-output-channel symmetric int8 of every matrix (jittable)."""

  def one(path, x):
    axes = _REDUCE_AXES.get(_leaf_name(path))
    if axes is None or x.ndim < 2:
      return x, jnp.ones((), jnp.float32)
    x = x.astype(jnp.float32)
    scale = jnp.max(jnp.abs(x), axis=axes, keepdims=True) / 127.0
    scale = jnp.where(scale == 0.0, 1.0, scale)
    return jnp.clip(jnp.round(x / scale), -127, 127).astype(jnp.int8), scale

  pairs = jax.tree_util.tree_map_with_path(one, params)
  is_pair = lambda t: isinstance(t, tuple)
  return QuantizedState(jax.tree.map(lambda t: t[0], pairs, is_leaf=is_pair),
                        jax.tree.map(lambda t: t[1], pairs, is_leaf=is_pair))


def dequantize_params(qparams: QuantizedState) -> nnx.State:
  """fp32 params (int8 * scale) with the original tree, ready for nnx.merge."""
  return jax.tree.map(
      lambda q, s: q.astype(jnp.float32) * s if q.dtype == jnp.int8 else q,
      qparams.values, qparams.scales)


def as_params(params: nnx.State | QuantizedState) -> nnx.State:
  """What the model runs with: dequantized if ``params`` is a QuantizedState."""
  return dequantize_params(params) if isinstance(params, QuantizedState) else params


def tree_bytes(tree) -> int:
  """Bytes held by the arrays of a pytree (params, a cache)."""
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree))


class Int8KVCache(NamedTuple):
  """Per layer: int8 keys [B, K, H, S] and values [B, K, S, H] (the layout of
  rlpt.models.KVCache), and their fp32 scales [B, K, S]."""

  k: tuple[jax.Array, ...]
  v: tuple[jax.Array, ...]
  k_scale: tuple[jax.Array, ...]
  v_scale: tuple[jax.Array, ...]

  @property
  def length(self) -> int:
    return self.k[0].shape[2]


def init_int8_cache(cfg: ModelConfig, batch: int, length: int) -> Int8KVCache:
  shape = (batch, cfg.num_kv_heads, length, cfg.head_dim)
  k_shape = (batch, cfg.num_kv_heads, cfg.head_dim, length)
  per_layer = lambda make: tuple(make() for _ in range(cfg.num_layers))
  return Int8KVCache(per_layer(lambda: jnp.zeros(k_shape, jnp.int8)),
                     per_layer(lambda: jnp.zeros(shape, jnp.int8)),
                     per_layer(lambda: jnp.ones(shape[:-1], jnp.float32)),
                     per_layer(lambda: jnp.ones(shape[:-1], jnp.float32)))


def quantize_kv(x_BxTxKxH: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Symmetric int8 per (token, head): returns (int8 [..., H], fp32 scale [...])."""
  x = x_BxTxKxH.astype(jnp.float32)
  scale = jnp.max(jnp.abs(x), axis=-1) / 127.0
  scale = jnp.where(scale == 0.0, 1.0, scale)
  q = jnp.clip(jnp.round(x / scale[..., None]), -127, 127).astype(jnp.int8)
  return q, scale


def dequantize_kv(q_BxKxSxH: jax.Array, scale_BxKxS: jax.Array) -> jax.Array:
  return q_BxKxSxH.astype(jnp.float32) * scale_BxKxS[..., None]
