"""Blockwise (flash) attention: O(T) memory forward and backward, skipped blocks cost nothing.

Queries and keys are cut into blocks of ``block_q`` x ``block_k``. For every
query block we first decide, from per-block position ranges, which key blocks
can hold a visible key at all (causal, sliding window, sinks, kv_valid), and
compact their indices into a list (O(T / block_k) memory, built inside the
loop over query blocks). The kernel then loops over only that list
(a ``fori_loop`` with a data-dependent trip count, i.e. a ``while_loop``), so a
masked-out block costs neither FLOPs nor memory traffic; causal attention does
about half the work of dense, a sliding window O(T * window).

The transposed test drives the backward pass, which is a hand-written
FlashAttention-2 backward (``jax.custom_vjp``): it keeps only q, k, v, the
output and the per-row log-sum-exp, and recomputes the probabilities block by
block, so training memory is also O(T). Autodiff through a data-dependent loop
is impossible anyway, which is the other reason for the custom rule.

The scheduling test is conservative (a block pair is kept if *some* entry may
be visible), and the exact mask is applied inside the pair, so results do not
depend on the block size. Blocks are summarised over the whole batch, so rows
of a ragged batch share a schedule.

Shape suffixes: B batch, T queries, S keys, K kv heads, G = N // K query heads
per kv head, H head_dim; Q, C = query / key block lengths; I, J = counts of
query / key blocks.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from rlpt.attention.reference import attention_mask

_F32 = jnp.float32
_IMAX = jnp.iinfo(jnp.int32).max


class BlockSpec(NamedTuple):
  """Static kernel settings (hashable, a nondiff argument of the custom_vjp)."""

  block_q: int
  block_k: int
  window: int | None
  num_sinks: int
  scale: float


def block_ranges(positions_BxT, valid_BxT, block: int):
  """Per-block (min, max) position over the batch, each [T // block] int32.

  Invalid entries are ignored; a block with none valid gets the empty range
  (int32 max, -int32 max), which no query can see.
  """
  b, t = positions_BxT.shape
  p_BxIxQ = positions_BxT.reshape(b, t // block, block).astype(jnp.int32)
  if valid_BxT is None:
    return p_BxIxQ.min(axis=(0, 2)), p_BxIxQ.max(axis=(0, 2))
  valid = valid_BxT.reshape(p_BxIxQ.shape)
  return (jnp.where(valid, p_BxIxQ, _IMAX).min(axis=(0, 2)),
          jnp.where(valid, p_BxIxQ, -_IMAX).max(axis=(0, 2)))


def _may_see(qmin, qmax, kmin, kmax, window, num_sinks):
  """Broadcasting block test: may some query in [qmin, qmax] see a key in [kmin, kmax]?"""
  needed = kmin <= qmax
  if window is not None:
    near = kmax > qmin - window
    if num_sinks:
      near |= kmin < num_sinks
    needed &= near
  return needed


def needed_block_pairs(q_positions_BxT, kv_positions_BxS, kv_valid_BxS, block_q: int,
                       block_k: int, window: int | None = None,
                       num_sinks: int = 0) -> jax.Array:
  """[I, J] bool: query block i may see a key in key block j (conservative).

  T and S must be multiples of block_q and block_k. Works on any token layout:
  only each block's position range matters. The kernels evaluate this one row
  (or column) at a time, so they never hold the I x J matrix.
  """
  qmin_I, qmax_I = block_ranges(q_positions_BxT, None, block_q)
  kmin_J, kmax_J = block_ranges(kv_positions_BxS, kv_valid_BxS, block_k)
  return _may_see(qmin_I[:, None], qmax_I[:, None], kmin_J[None], kmax_J[None], window,
                  num_sinks)


def _compact(needed_J):
  """(indices of the True entries first [J] int32, their count): an O(J) scatter."""
  n = needed_J.shape[0]
  slot = jnp.where(needed_J, jnp.cumsum(needed_J, dtype=jnp.int32) - 1, n)
  order = jnp.zeros((n,), jnp.int32).at[slot].set(jnp.arange(n, dtype=jnp.int32), mode="drop")
  return order, needed_J.sum(dtype=jnp.int32)


def _slice(x, start, size):
  return lax.dynamic_slice_in_dim(x, start, size, axis=1)


def _scores(q_BxQxKxGxH, k_BxCxKxH, scale):
  s = jnp.einsum("bqkgh,bckh->bkgqc", q_BxQxKxGxH, k_BxCxKxH, preferred_element_type=_F32,
                 precision=lax.Precision.HIGHEST)
  return s * scale


def _block_mask(qp_BxQ, kp_BxC, kvalid_BxC, spec):
  return attention_mask(qp_BxQ, kp_BxC, kvalid_BxC, spec.window, spec.num_sinks)[:, None, None]


def flash_forward(q_BxTxKxGxH, k_BxSxKxH, v_BxSxKxH, q_pos_BxT, kv_pos_BxS, kv_valid_BxS,
                  spec: BlockSpec):
  """Forward pass: (out [B, T, K, G, H] fp32, lse [B, T, K, G] fp32).

  ``lse`` is -inf for rows that see no key (their output is 0). T and S must be
  multiples of the block sizes. Not differentiable by itself; see ``_flash``.
  """
  b, t, kh, g, h = q_BxTxKxGxH.shape
  bq, bk = spec.block_q, spec.block_k
  qmin_I, qmax_I = block_ranges(q_pos_BxT, None, bq)
  kmin_J, kmax_J = block_ranges(kv_pos_BxS, kv_valid_BxS, bk)

  def q_block(i, carry):
    out, lse = carry
    q_b = _slice(q_BxTxKxGxH, i * bq, bq)
    qp_b = _slice(q_pos_BxT, i * bq, bq)
    order_J, count = _compact(_may_see(qmin_I[i], qmax_I[i], kmin_J, kmax_J, spec.window,
                                       spec.num_sinks))

    def kv_block(n, state):
      m_BxKxGxQ, l_BxKxGxQ, acc_BxKxGxQxH = state
      j = order_J[n]
      k_b = _slice(k_BxSxKxH, j * bk, bk)
      v_b = _slice(v_BxSxKxH, j * bk, bk)
      mask = _block_mask(qp_b, _slice(kv_pos_BxS, j * bk, bk), _slice(kv_valid_BxS, j * bk, bk),
                         spec)
      s = jnp.where(mask, _scores(q_b, k_b, spec.scale), -jnp.inf)
      m_new = jnp.maximum(m_BxKxGxQ, s.max(axis=-1))
      # A row with nothing visible so far keeps m = -inf; offset it by 0 so
      # that exp() gives exact zeros instead of NaN.
      m_safe = jnp.where(jnp.isneginf(m_new), 0.0, m_new)
      p = jnp.exp(s - m_safe[..., None])
      corr = jnp.exp(m_BxKxGxQ - m_safe)
      l_new = l_BxKxGxQ * corr + p.sum(axis=-1)
      pv = jnp.einsum("bkgqc,bckh->bkgqh", p.astype(v_b.dtype), v_b, preferred_element_type=_F32,
                      precision=lax.Precision.HIGHEST)
      return m_new, l_new, acc_BxKxGxQxH * corr[..., None] + pv

    init = (jnp.full((b, kh, g, bq), -jnp.inf, _F32), jnp.zeros((b, kh, g, bq), _F32),
            jnp.zeros((b, kh, g, bq, h), _F32))
    m, l, acc = lax.fori_loop(0, count, kv_block, init)
    o_b = acc / jnp.where(l == 0.0, 1.0, l)[..., None]
    lse_b = jnp.where(l == 0.0, -jnp.inf, m + jnp.log(jnp.where(l == 0.0, 1.0, l)))
    out = lax.dynamic_update_slice_in_dim(out, jnp.moveaxis(o_b, 3, 1), i * bq, axis=1)
    lse = lax.dynamic_update_slice_in_dim(lse, jnp.moveaxis(lse_b, 3, 1), i * bq, axis=1)
    return out, lse

  init = (jnp.zeros((b, t, kh, g, h), _F32), jnp.full((b, t, kh, g), -jnp.inf, _F32))
  return lax.fori_loop(0, t // bq, q_block, init)


def flash_backward(q_BxTxKxGxH, k_BxSxKxH, v_BxSxKxH, q_pos_BxT, kv_pos_BxS, kv_valid_BxS,
                   out_BxTxKxGxH, lse_BxTxKxG, dout_BxTxKxGxH, spec: BlockSpec):
  """FlashAttention-2 backward: (dq, dk, dv) in fp32, recomputing probabilities per block.

  ``out`` and ``lse`` must be the *final* output and log-sum-exp of each row
  (over all keys it attends, possibly beyond k_BxSxKxH: ring attention). Then
  exp(s - lse) are the true probabilities and the returned gradients are this
  key set's exact share, so partial results over disjoint key sets just add.
  """
  b, t, kh, g, h = q_BxTxKxGxH.shape
  bq, bk = spec.block_q, spec.block_k
  qmin_I, qmax_I = block_ranges(q_pos_BxT, None, bq)
  kmin_J, kmax_J = block_ranges(kv_pos_BxS, kv_valid_BxS, bk)
  do = dout_BxTxKxGxH.astype(_F32)
  delta_BxTxKxG = jnp.sum(do * out_BxTxKxGxH.astype(_F32), axis=-1)
  hi = lax.Precision.HIGHEST

  def kv_block(j, carry):
    dq, dk, dv = carry
    k_b = _slice(k_BxSxKxH, j * bk, bk)
    v_b = _slice(v_BxSxKxH, j * bk, bk)
    kp_b = _slice(kv_pos_BxS, j * bk, bk)
    kvalid_b = _slice(kv_valid_BxS, j * bk, bk)
    order_I, count = _compact(_may_see(qmin_I, qmax_I, kmin_J[j], kmax_J[j], spec.window,
                                       spec.num_sinks))

    def q_block(n, state):
      dq, dk_BxCxKxH, dv_BxCxKxH = state
      i = order_I[n]
      q_b = _slice(q_BxTxKxGxH, i * bq, bq)
      do_b = _slice(do, i * bq, bq)
      lse_b = jnp.moveaxis(_slice(lse_BxTxKxG, i * bq, bq), 1, 3)
      delta_b = jnp.moveaxis(_slice(delta_BxTxKxG, i * bq, bq), 1, 3)
      mask = _block_mask(_slice(q_pos_BxT, i * bq, bq), kp_b, kvalid_b, spec)
      s = _scores(q_b, k_b, spec.scale)
      # lse is -inf only on rows that see nothing, where mask is all False.
      p = jnp.where(mask, jnp.exp(s - lse_b[..., None]), 0.0)
      dv_BxCxKxH += jnp.einsum("bkgqc,bqkgh->bckh", p, do_b, precision=hi)
      dp = jnp.einsum("bqkgh,bckh->bkgqc", do_b, v_b, preferred_element_type=_F32, precision=hi)
      ds = p * (dp - delta_b[..., None]) * spec.scale
      dk_BxCxKxH += jnp.einsum("bkgqc,bqkgh->bckh", ds, q_b, preferred_element_type=_F32,
                               precision=hi)
      dq_b = jnp.einsum("bkgqc,bckh->bqkgh", ds, k_b, preferred_element_type=_F32, precision=hi)
      dq = lax.dynamic_update_slice_in_dim(dq, _slice(dq, i * bq, bq) + dq_b, i * bq, axis=1)
      return dq, dk_BxCxKxH, dv_BxCxKxH

    zeros = jnp.zeros((b, bk, kh, h), _F32)
    dq, dk_b, dv_b = lax.fori_loop(0, count, q_block, (dq, zeros, zeros))
    dk = lax.dynamic_update_slice_in_dim(dk, dk_b, j * bk, axis=1)
    dv = lax.dynamic_update_slice_in_dim(dv, dv_b, j * bk, axis=1)
    return dq, dk, dv

  s_len = k_BxSxKxH.shape[1]
  init = (jnp.zeros((b, t, kh, g, h), _F32), jnp.zeros((b, s_len, kh, h), _F32),
          jnp.zeros((b, s_len, kh, h), _F32))
  return lax.fori_loop(0, s_len // bk, kv_block, init)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _flash(spec, q, k, v, q_pos, kv_pos, kv_valid):
  out, _ = flash_forward(q, k, v, q_pos, kv_pos, kv_valid, spec)
  return out.astype(q.dtype)


def _flash_fwd(spec, q, k, v, q_pos, kv_pos, kv_valid):
  out, lse = flash_forward(q, k, v, q_pos, kv_pos, kv_valid, spec)
  return out.astype(q.dtype), (q, k, v, q_pos, kv_pos, kv_valid, out, lse)


def _flash_bwd(spec, res, dout):
  q, k, v, q_pos, kv_pos, kv_valid, out, lse = res
  dq, dk, dv = flash_backward(q, k, v, q_pos, kv_pos, kv_valid, out, lse, dout, spec)
  return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


def pad_axis1(x, multiple: int, value=None):
  """Pads axis 1 up to a multiple; with value None, repeats the last entry (edge)."""
  pad = -x.shape[1] % multiple
  if not pad:
    return x
  widths = [(0, 0)] * x.ndim
  widths[1] = (0, pad)
  if value is None:
    return jnp.pad(x, widths, mode="edge")
  return jnp.pad(x, widths, constant_values=value)


def block_sizes(t: int, s: int, block_size: int) -> tuple[int, int]:
  """Query / key block lengths: ``block_size``, shrunk for short sequences (decode)."""
  return min(block_size, t), min(block_size, s)


@functools.partial(jax.jit, static_argnames=("window", "num_sinks", "block_size"))
def blockwise_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, *, q_positions, kv_positions,
                        kv_valid=None, window: int | None = None, num_sinks: int = 0,
                        block_size: int = 512) -> jax.Array:
  """Flash attention with block skipping; [B, T, N, H] in q's dtype, fp32 inside.

  Differentiable w.r.t. q, k and v with an O(T) backward. Lengths need not be
  multiples of ``block_size``: queries are padded (and dropped), padded keys
  are invalid. See ``rlpt.attention.reference`` for the masking rule.
  """
  b, t, n, h = q_BxTxNxH.shape
  s, kh = k_BxSxKxH.shape[1], k_BxSxKxH.shape[2]
  bq, bk = block_sizes(t, s, block_size)
  spec = BlockSpec(bq, bk, window, num_sinks, h ** -0.5)
  if kv_valid is None:
    kv_valid = jnp.ones((b, s), bool)
  q = pad_axis1(q_BxTxNxH.reshape(b, t, kh, n // kh, h), bq, 0)
  out = _flash(spec, q, pad_axis1(k_BxSxKxH, bk, 0), pad_axis1(v_BxSxKxH, bk, 0),
               pad_axis1(q_positions, bq), pad_axis1(kv_positions, bk),
               pad_axis1(kv_valid, bk, False))
  return out[:, :t].reshape(b, t, n, h)
