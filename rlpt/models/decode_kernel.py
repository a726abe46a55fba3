"""Decode attention over a cache layer as one Pallas kernel (TPU, Mosaic).

``attention_with_lse`` (rlpt.models.cache) is the reference and the default:
two XLA einsums over the whole cache layer. This kernel computes the same
softmax attention block by block with an online softmax (flash decoding):

  grid (row B, kv head K, key block S / block)
  each step reads one block of keys [H, block] and values [block, H] of one
  kv head in the cache's own dtype (bf16, fp32, or int8 codes with their
  fp32 scales), multiplies it by all the queries that share that head
  (Q queries x G grouped heads at once: the cache is read once per row, not
  once per query head) and folds it into fp32 running max, sum and output.

Only the live part of a row is read: each row's last block holding a visible
key is prefetched as a scalar, and the key/value block index is clamped to it,
so the steps past it ask for the block already in VMEM (Pallas skips the copy)
and do no work. Visibility is a key mask per row shared by the row's queries
([B, S]: padding, prompt length, window), so the kernel serves decode (one
query a row) and a prefix shared by a group (the group's queries on one row).

On CPU the same kernel runs in Pallas's interpret mode, which is how the tests
check it against the XLA path. GPU (Triton) needs the block loop inside one
program instead of a sequential grid axis; it is not written, and
``attention_with_lse`` stays the path there.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from rlpt.config.rl_sections import DECODE_KERNELS
from rlpt.models.cache import LayerKV, attention_with_lse, merge_attention

DEFAULT_BLOCK = 512


def check_kernel(name: str) -> str:
  if name not in DECODE_KERNELS:
    raise ValueError(f"decode_kernel {name!r}; expected one of {list(DECODE_KERNELS)} (pallas: TPU, "
                     "pallas-interpret: the same kernel interpreted, for CPU tests).")
  return name


def shared_mask_attention(q_BxTxNxH, kv, key_mask_BxS, kernel: str = "xla"):
  """(out, lse) of every query of a row over the slots ``key_mask_BxS`` marks,
  by ``kernel`` (``DECODE_KERNELS``); the XLA path is ``attention_with_lse``."""
  if kernel == "xla":
    b, t = q_BxTxNxH.shape[:2]
    mask = jnp.broadcast_to(key_mask_BxS[:, None, :], (b, t, key_mask_BxS.shape[1]))
    return attention_with_lse(q_BxTxNxH, kv, mask)
  return decode_attention(q_BxTxNxH, kv, key_mask_BxS, interpret=check_kernel(kernel) != "pallas")


def _kernel(last_ref, q_ref, k_ref, v_ref, mask_ref, *rest, int8: bool, n_blocks: int,
            dot_dtype):
  if int8:
    ks_ref, vs_ref, o_ref, lse_ref, m_sc, l_sc, acc_sc = rest
  else:
    o_ref, lse_ref, m_sc, l_sc, acc_sc = rest
  row, blk = pl.program_id(0), pl.program_id(2)

  @pl.when(blk == 0)
  def _():
    m_sc[...] = jnp.full(m_sc.shape, -jnp.inf, jnp.float32)
    l_sc[...] = jnp.zeros(l_sc.shape, jnp.float32)
    acc_sc[...] = jnp.zeros(acc_sc.shape, jnp.float32)

  @pl.when(blk <= last_ref[row])
  def _():
    q = q_ref[0, 0].astype(dot_dtype)                 # [QG, H]
    k = k_ref[0, 0].astype(dot_dtype)                 # [H, block]
    s = jnp.dot(q, k, preferred_element_type=jnp.float32)
    if int8:
      s = s * ks_ref[0, 0]                            # [1, block] key scales
    s = jnp.where(mask_ref[0] != 0, s, -jnp.inf)
    m_prev = m_sc[...]
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=-1, keepdims=True))
    m_safe = jnp.where(jnp.isfinite(m_new), m_new, 0.0)
    p = jnp.exp(s - m_safe)
    corr = jnp.exp(m_prev - m_safe)
    l_sc[...] = corr * l_sc[...] + jnp.sum(p, axis=-1, keepdims=True)
    if int8:
      p = p * vs_ref[0, 0]                            # [1, block] value scales
    v = v_ref[0, 0].astype(dot_dtype)                 # [block, H]
    acc_sc[...] = corr * acc_sc[...] + jnp.dot(p.astype(dot_dtype), v,
                                               preferred_element_type=jnp.float32)
    m_sc[...] = m_new

  @pl.when(blk == n_blocks - 1)
  def _():
    l = l_sc[...]
    o_ref[0, 0] = acc_sc[...] / jnp.where(l == 0, 1.0, l)
    m = jnp.where(jnp.isfinite(m_sc[...]), m_sc[...], 0.0)
    lse_ref[0, 0] = jnp.where(l == 0, -jnp.inf, m + jnp.log(jnp.where(l == 0, 1.0, l)))


def decode_attention(q_BxQxNxH, kv, key_mask_BxS, scale: float | None = None,
                     block: int | None = None, interpret: bool = False):
  """Softmax attention of Q queries a row over one cache layer.

  ``kv``: a ``LayerKV`` (keys [B, K, H, S], values [B, K, S, H], optional int8
  scales [B, K, S]); ``key_mask_BxS``: which slots each row's queries see.
  ``block``: slots a grid step reads (default ``DEFAULT_BLOCK``, read when
  traced). Returns (out [B, Q, N, H] fp32, lse [B, Q, N]) as
  ``attention_with_lse`` does: a query that sees no key gets out 0 and lse -inf.
  """
  b, qn, n, h = q_BxQxNxH.shape
  s = kv.v.shape[2]
  block = block or DEFAULT_BLOCK
  n_blocks = s // block
  if n_blocks == 0:  # shorter than one block: nothing for a kernel to skip
    return attention_with_lse(q_BxQxNxH, kv, _per_query(key_mask_BxS, qn), scale)
  out, lse = _kernel_call(q_BxQxNxH, kv, key_mask_BxS, scale, block, n_blocks, interpret)
  if s == n_blocks * block:
    return out, lse
  # The slots past the last whole block (fewer than a block; a cache of 2K + 1
  # slots has one) go through the XLA path, and the two halves merge exactly.
  cut = n_blocks * block
  scale_tail = lambda x: None if x is None else x[..., cut:]
  tail = LayerKV(kv.k[..., cut:], kv.v[:, :, cut:], scale_tail(kv.k_scale), scale_tail(kv.v_scale))
  out_t, lse_t = attention_with_lse(q_BxQxNxH, tail, _per_query(key_mask_BxS[:, cut:], qn), scale)
  return merge_attention(out, lse, out_t, lse_t), jnp.logaddexp(lse, lse_t)


def _per_query(mask_BxS, qn: int):
  return jnp.broadcast_to(mask_BxS[:, None, :], (mask_BxS.shape[0], qn, mask_BxS.shape[1]))


def _kernel_call(q_BxQxNxH, kv, key_mask_BxS, scale, blk: int, n_blocks: int, interpret: bool):
  """The kernel over the first ``n_blocks`` blocks of ``blk`` slots."""
  b, qn, n, h = q_BxQxNxH.shape
  kh = kv.k.shape[1]
  g, qg = n // kh, qn * (n // kh)
  int8 = kv.k_scale is not None
  dt = q_BxQxNxH.dtype if jnp.issubdtype(q_BxQxNxH.dtype, jnp.floating) else jnp.float32
  q = (q_BxQxNxH.astype(jnp.float32) * jnp.float32(h ** -0.5 if scale is None else scale))
  q = q.reshape(b, qn, kh, g, h).transpose(0, 2, 1, 3, 4).reshape(b, kh, qg, h).astype(dt)
  mask = key_mask_BxS.astype(jnp.int32)
  # The last block with a visible key (0 for a row that sees none: one block
  # is read and masked out).
  cut = n_blocks * blk
  last_slot = jnp.max(jnp.where(mask[:, :cut] != 0, jnp.arange(cut)[None], -1), axis=1)
  last_B = jnp.maximum(last_slot, 0) // blk

  def live(i, j, t, last):
    return jnp.minimum(t, last[i])

  in_specs = [
      pl.BlockSpec((1, 1, qg, h), lambda i, j, t, last: (i, j, 0, 0)),
      pl.BlockSpec((1, 1, h, blk), lambda i, j, t, last: (i, j, 0, live(i, j, t, last))),
      pl.BlockSpec((1, 1, blk, h), lambda i, j, t, last: (i, j, live(i, j, t, last), 0)),
      pl.BlockSpec((1, 1, blk), lambda i, j, t, last: (i, 0, live(i, j, t, last))),
  ]
  args = [q, kv.k, kv.v, mask[:, None, :]]
  if int8:
    scale_spec = pl.BlockSpec((1, 1, 1, blk), lambda i, j, t, last: (i, j, 0, live(i, j, t, last)))
    in_specs += [scale_spec, scale_spec]
    args += [kv.k_scale[:, :, None, :], kv.v_scale[:, :, None, :]]
  out_specs = [pl.BlockSpec((1, 1, qg, h), lambda i, j, t, last: (i, j, 0, 0)),
               pl.BlockSpec((1, 1, qg, 1), lambda i, j, t, last: (i, j, 0, 0))]
  grid_spec = pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=1, grid=(b, kh, n_blocks), in_specs=in_specs, out_specs=out_specs,
      scratch_shapes=[pltpu.VMEM((qg, 1), jnp.float32), pltpu.VMEM((qg, 1), jnp.float32),
                      pltpu.VMEM((qg, h), jnp.float32)])
  out, lse = pl.pallas_call(
      # Interpreted on CPU, a bf16 x bf16 -> fp32 product has no kernel: its
      # operands are widened inside the block, which is exact for bf16 values.
      functools.partial(_kernel, int8=int8, n_blocks=n_blocks,
                        dot_dtype=jnp.float32 if interpret else dt),
      grid_spec=grid_spec,
      out_shape=[jax.ShapeDtypeStruct((b, kh, qg, h), jnp.float32),
                 jax.ShapeDtypeStruct((b, kh, qg, 1), jnp.float32)],
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=("parallel", "parallel", "arbitrary")),
      interpret=interpret,
  )(last_B.astype(jnp.int32), *args)
  out = out.reshape(b, kh, qn, g, h).transpose(0, 2, 1, 3, 4).reshape(b, qn, n, h)
  lse = lse.reshape(b, kh, qn, g).transpose(0, 2, 1, 3).reshape(b, qn, n)
  return out, lse
