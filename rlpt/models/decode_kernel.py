"""Decode attention over a cache layer as one Pallas kernel, for TPU (Mosaic)
and for GPU (Triton).

``attention_with_lse`` (rlpt.models.cache) is the reference and the default:
two XLA einsums over the whole cache layer. Both kernels compute the same
softmax attention block by block with an online softmax (flash decoding),
reading each block of keys [H, block] and values [block, H] of one kv head in
the cache's own dtype (bf16, fp32, or int8 codes with their fp32 scales),
multiplying it by all the queries that share that head (Q queries x G grouped
heads at once: the cache is read once per row, not once per query head) and
folding it into an fp32 running max, sum and output.

Only the live part of a row is read. TPU: grid (row B, kv head K, key block);
each row's last block holding a visible key is prefetched as a scalar and the
key/value block index is clamped to it, so the steps past it ask for the block
already in VMEM (Pallas skips the copy) and do no work. GPU: Triton has no
sequential grid axis to carry the softmax across, so the grid is (row, kv
head, key split) and each program loops over the blocks of its split between
the row's first and last visible slot; the splits' partial softmaxes merge
exactly in XLA. Visibility is a key mask per row shared by the row's queries
([B, S]: padding, prompt length, window), so the kernels serve decode (one
query a row) and a prefix shared by a group (the group's queries on one row).

On CPU both kernels run in Pallas's interpret mode, which is how the tests
check them against the XLA path.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

from rlpt.config.rl_sections import DECODE_KERNELS
from rlpt.models.cache import LayerKV, attention_with_lse, merge_attention

DEFAULT_BLOCK = 512


def check_kernel(name: str) -> str:
  if name not in DECODE_KERNELS:
    raise ValueError(f"decode_kernel {name!r}; expected one of {list(DECODE_KERNELS)} (pallas: the "
                     "TPU or GPU kernel, for the backend it runs on; pallas-tpu / pallas-gpu: that "
                     "one, to compile ahead of time; pallas-interpret / pallas-interpret-gpu: that "
                     "kernel interpreted, for CPU tests).")
  return name


def kernel_backend(name: str, platform: str | None = None) -> tuple[str, bool]:
  """(backend, interpret) of a ``DECODE_KERNELS`` choice other than "xla";
  "pallas" takes the kernel of ``platform`` (default: JAX's default backend)."""
  fixed = {"pallas-tpu": ("tpu", False), "pallas-gpu": ("gpu", False),
           "pallas-interpret": ("tpu", True), "pallas-interpret-gpu": ("gpu", True)}
  if check_kernel(name) in fixed:
    return fixed[name]
  platform = platform or jax.default_backend()
  if platform in ("tpu", "gpu", "cuda", "rocm"):
    return ("tpu" if platform == "tpu" else "gpu"), False
  raise ValueError(f"decode_kernel 'pallas' runs on a TPU or a GPU; this backend is {platform!r}: "
                   "use 'xla' ('pallas-tpu' / 'pallas-gpu' to compile for a chip not here, "
                   "'pallas-interpret' / 'pallas-interpret-gpu' to test a kernel).")


def shared_mask_attention(q_BxTxNxH, kv, key_mask_BxS, kernel: str = "xla"):
  """(out, lse) of every query of a row over the slots ``key_mask_BxS`` marks,
  by ``kernel`` (``DECODE_KERNELS``); the XLA path is ``attention_with_lse``."""
  if kernel == "xla":
    b, t = q_BxTxNxH.shape[:2]
    mask = jnp.broadcast_to(key_mask_BxS[:, None, :], (b, t, key_mask_BxS.shape[1]))
    return attention_with_lse(q_BxTxNxH, kv, mask)
  backend, interpret = kernel_backend(kernel)
  return decode_attention(q_BxTxNxH, kv, key_mask_BxS, interpret=interpret, backend=backend)


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
                     block: int | None = None, interpret: bool = False, backend: str = "tpu",
                     splits: int | None = None):
  """Softmax attention of Q queries a row over one cache layer.

  ``kv``: a ``LayerKV`` (keys [B, K, H, S], values [B, K, S, H], optional int8
  scales [B, K, S]); ``key_mask_BxS``: which slots each row's queries see.
  ``backend``: "tpu" (Mosaic) or "gpu" (Triton) kernel. ``block``: slots one
  step reads (default ``DEFAULT_BLOCK`` / ``DEFAULT_GPU_BLOCK``, read when
  traced); ``splits``: the GPU kernel's key splits (default ``gpu_splits``).
  Returns (out [B, Q, N, H] fp32, lse [B, Q, N]) as ``attention_with_lse``
  does: a query that sees no key gets out 0 and lse -inf.
  """
  if backend not in ("tpu", "gpu"):
    raise ValueError(f"decode kernel backend {backend!r}; expected 'tpu' or 'gpu'.")
  b, qn, n, h = q_BxQxNxH.shape
  s = kv.v.shape[2]
  block = block or (DEFAULT_BLOCK if backend == "tpu" else DEFAULT_GPU_BLOCK)
  n_blocks = s // block
  if n_blocks == 0:  # shorter than one block: nothing for a kernel to skip
    return attention_with_lse(q_BxQxNxH, kv, _per_query(key_mask_BxS, qn), scale)
  kh = kv.k.shape[1]
  g, qg = n // kh, qn * (n // kh)
  dt = q_BxQxNxH.dtype if jnp.issubdtype(q_BxQxNxH.dtype, jnp.floating) else jnp.float32
  q = (q_BxQxNxH.astype(jnp.float32) * jnp.float32(h ** -0.5 if scale is None else scale))
  # A row's Q queries and G grouped heads share their kv head's keys: one
  # [Q*G, H] block of queries per (row, kv head).
  q = q.reshape(b, qn, kh, g, h).transpose(0, 2, 1, 3, 4).reshape(b, kh, qg, h).astype(dt)
  cut = n_blocks * block
  mask = key_mask_BxS[:, :cut]  # each kernel takes it in the integer width it reads
  # The kernels index blocks of the first ``cut`` slots of the cache as it is
  # (a slice would be a copy of the layer).
  if backend == "tpu":
    out, lse = _tpu_call(q, kv, mask, block, interpret)            # [B, K, QG, H], [B, K, QG]
  else:
    out, lse = _gpu_call(q, kv, mask, block, interpret, splits)
  out = out.reshape(b, kh, qn, g, h).transpose(0, 2, 1, 3, 4).reshape(b, qn, n, h)
  lse = lse.reshape(b, kh, qn, g).transpose(0, 2, 1, 3).reshape(b, qn, n)
  if s == cut:
    return out, lse
  # The slots past the last whole block (fewer than a block; a cache of 2K + 1
  # slots has one) go through the XLA path, and the two halves merge exactly.
  scale_tail = lambda x: None if x is None else x[..., cut:]
  tail = LayerKV(kv.k[..., cut:], kv.v[:, :, cut:], scale_tail(kv.k_scale), scale_tail(kv.v_scale))
  out_t, lse_t = attention_with_lse(q_BxQxNxH, tail, _per_query(key_mask_BxS[:, cut:], qn), scale)
  return merge_attention(out, lse, out_t, lse_t), jnp.logaddexp(lse, lse_t)


def _per_query(mask_BxS, qn: int):
  return jnp.broadcast_to(mask_BxS[:, None, :], (mask_BxS.shape[0], qn, mask_BxS.shape[1]))


def _live_slots(mask_BxS) -> tuple[jax.Array, jax.Array]:
  """(first, last) visible slot of each row; a row that sees none gets (S, -1)."""
  s = mask_BxS.shape[1]
  slots = jnp.arange(s)[None]
  first = jnp.min(jnp.where(mask_BxS != 0, slots, s), axis=1)
  last = jnp.max(jnp.where(mask_BxS != 0, slots, -1), axis=1)
  return first.astype(jnp.int32), last.astype(jnp.int32)


def _tpu_call(q, kv, mask, blk: int, interpret: bool):
  """The TPU kernel: grid (row, kv head, block); q [B, K, QG, H] scaled, in
  the compute dtype; returns (out [B, K, QG, H], lse [B, K, QG])."""
  b, kh, qg, h = q.shape
  n_blocks = mask.shape[1] // blk
  int8 = kv.k_scale is not None
  # The last block with a visible key (0 for a row that sees none: one block
  # is read and masked out).
  last_B = jnp.maximum(_live_slots(mask)[1], 0) // blk

  def live(i, j, t, last):
    return jnp.minimum(t, last[i])

  in_specs = [
      pl.BlockSpec((1, 1, qg, h), lambda i, j, t, last: (i, j, 0, 0)),
      pl.BlockSpec((1, 1, h, blk), lambda i, j, t, last: (i, j, 0, live(i, j, t, last))),
      pl.BlockSpec((1, 1, blk, h), lambda i, j, t, last: (i, j, live(i, j, t, last), 0)),
      pl.BlockSpec((1, 1, blk), lambda i, j, t, last: (i, 0, live(i, j, t, last))),
  ]
  args = [q, kv.k, kv.v, mask.astype(jnp.int32)[:, None, :]]
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
                        dot_dtype=jnp.float32 if interpret else q.dtype),
      grid_spec=grid_spec,
      out_shape=[jax.ShapeDtypeStruct((b, kh, qg, h), jnp.float32),
                 jax.ShapeDtypeStruct((b, kh, qg, 1), jnp.float32)],
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=("parallel", "parallel", "arbitrary")),
      interpret=interpret,
  )(last_B.astype(jnp.int32), *args)
  return out, lse[..., 0]


# The GPU kernel's defaults: blocks of 64 slots (a [64, 64] bf16 block of keys
# is 8 KB; a short row wastes less of its last block than with 512), and key
# splits until the grid has about this many programs (a few per SM of an
# H100 / H200, 132 SMs): batch 256 x 4 kv heads needs none, batch 8 splits 16.
DEFAULT_GPU_BLOCK = 64
GPU_TARGET_PROGRAMS = 512


def gpu_splits(b: int, kh: int, n_blocks: int) -> int:
  """Key splits per (row, kv head): the largest divisor of ``n_blocks`` not
  above what brings the grid to ``GPU_TARGET_PROGRAMS`` programs."""
  want = max(1, -(-GPU_TARGET_PROGRAMS // (b * kh)))
  return max(d for d in range(1, n_blocks + 1) if n_blocks % d == 0 and d <= want)


def _gpu_kernel(q_ref, k_ref, v_ref, mask_ref, span_ref, *rest, int8: bool, blk: int,
                split_blocks: int, dot_dtype):
  if int8:
    ks_ref, vs_ref, o_ref, lse_ref = rest
  else:
    o_ref, lse_ref = rest
  # This program's blocks are [base, base + split_blocks) of its (row, kv
  # head); it loops over those between the row's first and last visible slot.
  base = pl.program_id(2) * split_blocks
  lo = jnp.clip(span_ref[0] // blk - base, 0, split_blocks)
  hi = jnp.clip(span_ref[1] // blk + 1 - base, 0, split_blocks)
  q = q_ref[...].astype(dot_dtype)                                   # [QG, H]
  qg, h = q.shape

  def body(t, carry):
    acc, m_prev, l_prev = carry
    sl = pl.ds(pl.multiple_of(t * blk, blk), blk)
    s = jnp.dot(q, k_ref[:, sl].astype(dot_dtype), preferred_element_type=jnp.float32)
    if int8:
      s = s * ks_ref[sl][None, :]                                    # key scales
    s = jnp.where(mask_ref[sl][None, :] != 0, s, -jnp.inf)           # [QG, blk]
    m_new = jnp.maximum(m_prev, jnp.max(s, axis=1))
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    p = jnp.exp(s - m_safe[:, None])
    corr = jnp.exp(m_prev - m_safe)
    l_new = corr * l_prev + jnp.sum(p, axis=1)
    if int8:
      p = p * vs_ref[sl][None, :]                                    # value scales
    pv = jnp.dot(p.astype(dot_dtype), v_ref[sl, :].astype(dot_dtype),
                 preferred_element_type=jnp.float32)
    return corr[:, None] * acc + pv, m_new, l_new

  init = (jnp.zeros((qg, h), jnp.float32), jnp.full((qg,), -jnp.inf, jnp.float32),
          jnp.zeros((qg,), jnp.float32))
  acc, m, l = jax.lax.fori_loop(lo, hi, body, init)
  safe_l = jnp.where(l == 0, 1.0, l)
  o_ref[...] = acc / safe_l[:, None]
  lse_ref[...] = jnp.where(l == 0, -jnp.inf, jnp.where(m == -jnp.inf, 0.0, m) + jnp.log(safe_l))


def _gpu_call(q, kv, mask, blk: int, interpret: bool, splits: int | None = None):
  """The GPU kernel (Pallas's Triton backend): grid (row, kv head, key split),
  each program looping over its split's live blocks (Triton has no sequential
  grid axis to carry a softmax across); the splits' partial softmaxes merge
  exactly in XLA. q [B, K, QG, H] scaled, in the compute dtype; returns (out
  [B, K, QG, H], lse [B, K, QG])."""
  b, kh, qg, h = q.shape
  n_blocks = mask.shape[1] // blk
  int8 = kv.k_scale is not None
  # Triton's blocks are powers of two of at least 16 on each side of a product.
  pow2 = lambda x: x >= 16 and x & (x - 1) == 0
  if not interpret and not (pow2(h) and pow2(blk)):
    raise ValueError(f"the GPU decode kernel needs head_dim and block powers of two >= 16, got "
                     f"head_dim {h} and block {blk}; use rollout.decode_kernel='xla'.")
  qgp = max(16, 1 << (qg - 1).bit_length())
  if qgp != qg:
    q = jnp.pad(q, ((0, 0), (0, 0), (0, qgp - qg), (0, 0)))
  splits = splits or gpu_splits(b, kh, n_blocks)
  if n_blocks % splits:
    raise ValueError(f"{splits} key splits do not divide {n_blocks} blocks.")
  length = n_blocks // splits * blk
  first, last = _live_slots(mask)
  span = jnp.stack([first, last], axis=1)                               # [B, 2]
  in_specs = [
      pl.BlockSpec((None, None, qgp, h), lambda i, j, p: (i, j, 0, 0)),
      pl.BlockSpec((None, None, h, length), lambda i, j, p: (i, j, 0, p)),
      pl.BlockSpec((None, None, length, h), lambda i, j, p: (i, j, p, 0)),
      pl.BlockSpec((None, length), lambda i, j, p: (i, p)),
      pl.BlockSpec((None, 2), lambda i, j, p: (i, 0)),
  ]
  # The mask as one byte a slot: 0.4% of the keys and values a row reads at
  # 4 kv heads x 64 dims in bf16 (an int32 mask would be 1.6%).
  args = [q, kv.k, kv.v, mask.astype(jnp.int8), span]
  if int8:
    scale_spec = pl.BlockSpec((None, None, length), lambda i, j, p: (i, j, p))
    in_specs += [scale_spec, scale_spec]
    args += [kv.k_scale, kv.v_scale]
  out, lse = pl.pallas_call(
      functools.partial(_gpu_kernel, int8=int8, blk=blk, split_blocks=n_blocks // splits,
                        dot_dtype=jnp.float32 if interpret else q.dtype),
      grid=(b, kh, splits), in_specs=in_specs,
      out_specs=[pl.BlockSpec((None, None, None, qgp, h), lambda i, j, p: (i, j, p, 0, 0)),
                 pl.BlockSpec((None, None, None, qgp), lambda i, j, p: (i, j, p, 0))],
      out_shape=[jax.ShapeDtypeStruct((b, kh, splits, qgp, h), jnp.float32),
                 jax.ShapeDtypeStruct((b, kh, splits, qgp), jnp.float32)],
      compiler_params=pltriton.CompilerParams(num_warps=4, num_stages=2),
      interpret=interpret, name="rlpt_decode_attention",
  )(*args)
  if splits > 1:  # the splits' partial softmaxes, merged exactly
    m = jnp.max(lse, axis=2, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, 0.0)
    w = jnp.exp(lse - m)
    total = jnp.sum(w, axis=2)
    safe = jnp.where(total == 0, 1.0, total)
    out = jnp.sum(out * w[..., None], axis=2) / safe[..., None]
    lse = jnp.where(total == 0, -jnp.inf, m[:, :, 0] + jnp.log(safe))
  else:
    out, lse = out[:, :, 0], lse[:, :, 0]
  return out[:, :, :qg], lse[:, :, :qg]
