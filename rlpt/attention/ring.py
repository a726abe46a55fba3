"""Ring attention over the ``sequence`` mesh axis, with a zigzag layout for causal balance.

Each of the n devices on the ``sequence`` axis holds T/n queries and the keys
and values of the same tokens. Key/value blocks travel around the ring with
``ppermute`` (with their positions and valid flags, so masking is by true
position whatever the layout); at each of the n steps a device runs the
blockwise kernel on its queries against the visiting block and merges the
partial result by log-sum-exp. The transfer for the next step is issued before
the compute, so XLA can overlap the two.

Layout. With a contiguous split, device d's queries see the keys of devices
<= d only: under causal masking device n-1 does n blocks of work and device 0
one, and every ring step waits for the slowest. Zigzag cuts the sequence into
2n chunks and gives device d chunks d and 2n-1-d: every device then owns one
early and one late chunk and does the same work (``ring_work_per_device``
counts it). Apart from attention a decoder is position-wise, so a model can
keep its activations in zigzag order end to end and permute only token ids and
positions once (``to_zigzag``); ``ring_attention(layout=...)`` permutes in and
out for callers that hold natural order.

Backward. A ``custom_vjp`` runs the ring again: key/value blocks travel with
their dk/dv accumulators, each device adds its queries' share computed by the
FlashAttention-2 backward from the saved final output and log-sum-exp, and
after n hops the accumulators are home. Residuals are only the local q, k, v,
output and lse, so memory per device is O(T/n) in training as well
(autodiff through the forward scan would keep every visiting block: O(T)).

Shape suffixes as in ``rlpt.attention.blockwise``; L = T / n, a device's share.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

from rlpt.attention.blockwise import (
    BlockSpec,
    block_sizes,
    flash_backward,
    flash_forward,
    needed_block_pairs,
    pad_axis1,
)

LAYOUTS = ("zigzag", "contiguous")


# ----------------------------------------------------------------------------- layout


def zigzag_indices(length: int, num_shards: int) -> np.ndarray:
  """[length] int: the natural index of the token at each slot of the zigzag layout.

  ``x_zigzag = x[:, zigzag_indices(T, n)]``; device d then holds chunks d and
  2n-1-d of 2n equal chunks. ``length`` must be a multiple of 2 * num_shards.
  """
  if length % (2 * num_shards):
    raise ValueError(f"zigzag layout needs length ({length}) divisible by 2 * num_shards "
                     f"({2 * num_shards}).")
  c = length // (2 * num_shards)
  chunks = [ch for d in range(num_shards) for ch in (d, 2 * num_shards - 1 - d)]
  return np.concatenate([np.arange(ch * c, (ch + 1) * c) for ch in chunks])


def to_zigzag(x: jax.Array, num_shards: int, axis: int = 1) -> jax.Array:
  """Permutes the sequence axis of ``x`` from natural into zigzag order."""
  return jnp.take(x, zigzag_indices(x.shape[axis], num_shards), axis=axis)


def from_zigzag(x: jax.Array, num_shards: int, axis: int = 1) -> jax.Array:
  """Inverse of ``to_zigzag``."""
  return jnp.take(x, np.argsort(zigzag_indices(x.shape[axis], num_shards)), axis=axis)


def ring_work_per_device(positions_T, num_shards: int, block_size: int,
                         window: int | None = None, num_sinks: int = 0) -> np.ndarray:
  """[num_shards] int: (query block, key block) pairs each device computes in one ring pass.

  ``positions_T`` is one row of positions *already in ring layout*; the count
  uses the kernel's own skipping rule, so it is the work the kernel does.
  """
  pos = jnp.asarray(positions_T, jnp.int32).reshape(num_shards, -1)
  local = pos.shape[1]
  bq, bk = block_sizes(local, local, block_size)
  if local % bq:
    raise ValueError(f"block_size {block_size} must divide the per-device length {local}.")
  counts = np.zeros(num_shards, np.int64)
  for d in range(num_shards):
    for src in range(num_shards):
      counts[d] += int(needed_block_pairs(pos[d][None], pos[src][None], None, bq, bk, window,
                                          num_sinks).sum())
  return counts


# ----------------------------------------------------------------------------- per device


def _merge(o1, lse1, o2, lse2):
  """Combines two partial softmax results over disjoint key sets."""
  lse = jnp.logaddexp(lse1, lse2)
  safe = jnp.where(jnp.isneginf(lse), 0.0, lse)
  return (o1 * jnp.exp(lse1 - safe)[..., None] + o2 * jnp.exp(lse2 - safe)[..., None]), lse


def _ring_perm(n):
  return [(i, (i + 1) % n) for i in range(n)]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _ring(spec, axis_name, n, q, k, v, q_pos, kv_pos, kv_valid):
  return _ring_fwd(spec, axis_name, n, q, k, v, q_pos, kv_pos, kv_valid)[0]


def _ring_fwd(spec, axis_name, n, q, k, v, q_pos, kv_pos, kv_valid):
  def attend(o, lse, kv):
    k_, v_, kp_, kvalid_ = kv
    o2, lse2 = flash_forward(q, k_, v_, q_pos, kp_, kvalid_, spec)
    return _merge(o, lse, o2, lse2)

  def step(carry, _):
    o, lse, kv = carry
    nxt = lax.ppermute(kv, axis_name, _ring_perm(n))
    o, lse = attend(o, lse, kv)
    return (o, lse, nxt), None

  o = jnp.zeros(q.shape, jnp.float32)
  lse = jnp.full(q.shape[:-1], -jnp.inf, jnp.float32)
  kv = (k, v, kv_pos, kv_valid)
  (o, lse, kv), _ = lax.scan(step, (o, lse, kv), None, length=n - 1)
  o, lse = attend(o, lse, kv)
  return o.astype(q.dtype), (q, k, v, q_pos, kv_pos, kv_valid, o, lse)


def _ring_bwd(spec, axis_name, n, res, dout):
  q, k, v, q_pos, kv_pos, kv_valid, out, lse = res
  perm = _ring_perm(n)

  def attend(dq, kv, dkv):
    k_, v_, kp_, kvalid_ = kv
    dq2, dk2, dv2 = flash_backward(q, k_, v_, q_pos, kp_, kvalid_, out, lse, dout, spec)
    return dq + dq2, (dkv[0] + dk2, dkv[1] + dv2)

  def step(carry, _):
    dq, kv, dkv = carry
    nxt = lax.ppermute(kv, axis_name, perm)
    dq, dkv = attend(dq, kv, dkv)
    return (dq, nxt, lax.ppermute(dkv, axis_name, perm)), None

  dq = jnp.zeros(q.shape, jnp.float32)
  dkv = (jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32))
  (dq, kv, dkv), _ = lax.scan(step, (dq, (k, v, kv_pos, kv_valid), dkv), None, length=n - 1)
  dq, dkv = attend(dq, kv, dkv)
  # The accumulators of the block visiting last belong to the next device.
  dk, dv = lax.ppermute(dkv, axis_name, perm)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None


_ring.defvjp(_ring_fwd, _ring_bwd)


def _local_ring(q_BxLxNxH, k_BxLxKxH, v_BxLxKxH, q_pos_BxL, kv_pos_BxL, kv_valid_BxL, *,
                axis_name, n, block_size, window, num_sinks):
  b, l, nh, h = q_BxLxNxH.shape
  kh = k_BxLxKxH.shape[2]
  bq, bk = block_sizes(l, l, block_size)
  spec = BlockSpec(bq, bk, window, num_sinks, h ** -0.5)
  q = pad_axis1(q_BxLxNxH.reshape(b, l, kh, nh // kh, h), bq, 0)
  out = _ring(spec, axis_name, n, q, pad_axis1(k_BxLxKxH, bk, 0), pad_axis1(v_BxLxKxH, bk, 0),
              pad_axis1(q_pos_BxL, bq), pad_axis1(kv_pos_BxL, bk), pad_axis1(kv_valid_BxL, bk, False))
  return out[:, :l].reshape(b, l, nh, h)


# ----------------------------------------------------------------------------- entry points


def _axis_size(mesh, axes) -> int:
  return int(np.prod([mesh.shape[a] for a in axes])) if axes else 1


def activation_specs(mesh, batch: int, kv_heads: int, seq_axis: str | None):
  """(spec of [B, T, heads, H] arrays, spec of [B, T] arrays) for attention under shard_map.

  Batch goes over whichever of ``data``/``fsdp`` the mesh has (if they divide
  it), heads over ``tensor`` if it divides the kv heads; everything else is
  replicated.
  """
  batch_axes = tuple(a for a in ("data", "fsdp") if a in mesh.shape and mesh.shape[a] > 1)
  if batch % _axis_size(mesh, batch_axes):
    batch_axes = ()
  heads = "tensor" if "tensor" in mesh.shape and mesh.shape["tensor"] > 1 else None
  if heads and kv_heads % mesh.shape[heads]:
    heads = None
  b = batch_axes or None
  return P(b, seq_axis, heads, None), P(b, seq_axis)


@functools.partial(jax.jit, static_argnames=("mesh", "axis_name", "window", "num_sinks",
                                             "block_size"))
def ring_attention_sharded(q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, *, q_positions, kv_positions,
                           kv_valid=None, mesh: Mesh, axis_name: str = "sequence",
                           window: int | None = None, num_sinks: int = 0,
                           block_size: int = 512) -> jax.Array:
  """Ring attention on arrays already in ring layout (any order; positions travel along).

  Self-attention: q, k and v hold the same T tokens, T a multiple of the
  ``axis_name`` size; device d owns the d-th contiguous slice of the given
  order. Returns [B, T, N, H] in the same layout and q's dtype.
  """
  n = mesh.shape[axis_name]
  b, t = q_BxTxNxH.shape[:2]
  if t % n:
    raise ValueError(f"ring attention needs the length ({t}) divisible by the '{axis_name}' "
                     f"axis size ({n}).")
  if kv_valid is None:
    kv_valid = jnp.ones(kv_positions.shape, bool)
  x_spec, pos_spec = activation_specs(mesh, b, k_BxTxKxH.shape[2], axis_name)
  body = functools.partial(_local_ring, axis_name=axis_name, n=n, block_size=block_size,
                           window=window, num_sinks=num_sinks)
  # check_vma=False: the loop carries start replicated (zeros) and become
  # device-varying after the first ppermute, which the checker rejects.
  fn = jax.shard_map(body, mesh=mesh, in_specs=(x_spec, x_spec, x_spec, pos_spec, pos_spec,
                                                pos_spec),
                     out_specs=x_spec, check_vma=False)
  return fn(q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, q_positions, kv_positions, kv_valid)


@functools.partial(jax.jit, static_argnames=("mesh", "axis_name", "layout", "window",
                                             "num_sinks", "block_size"))
def ring_attention(q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, *, q_positions, kv_positions,
                   kv_valid=None, mesh: Mesh, axis_name: str = "sequence",
                   layout: str = "zigzag", window: int | None = None, num_sinks: int = 0,
                   block_size: int = 512) -> jax.Array:
  """Ring attention on natural-order arrays: pads, lays out, runs the ring, restores order.

  ``layout`` is "zigzag" (balanced causal work) or "contiguous". Returns
  [B, T, N, H] in natural order and q's dtype.
  """
  if layout not in LAYOUTS:
    raise ValueError(f"ring layout must be one of {LAYOUTS}, got '{layout}'.")
  n = mesh.shape[axis_name]
  b, t = q_BxTxNxH.shape[:2]
  if kv_valid is None:
    kv_valid = jnp.ones(kv_positions.shape, bool)
  chunks = 2 * n if layout == "zigzag" else n
  arrays = [pad_axis1(x, chunks, 0) for x in (q_BxTxNxH, k_BxTxKxH, v_BxTxKxH)]
  arrays += [pad_axis1(q_positions, chunks), pad_axis1(kv_positions, chunks),
             pad_axis1(kv_valid, chunks, False)]
  if layout == "zigzag":
    arrays = [to_zigzag(x, n) for x in arrays]
  q, k, v, qp, kp, kvalid = arrays
  out = ring_attention_sharded(q, k, v, q_positions=qp, kv_positions=kp, kv_valid=kvalid,
                               mesh=mesh, axis_name=axis_name, window=window,
                               num_sinks=num_sinks, block_size=block_size)
  if layout == "zigzag":
    out = from_zigzag(out, n)
  return out[:, :t]
