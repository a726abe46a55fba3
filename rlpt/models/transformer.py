"""Llama-style decoder: RoPE, RMSNorm, grouped-query attention, SwiGLU.

Every parameter carries logical ``axes`` metadata that rlpt.sharding maps to
mesh axes; the model never names a mesh axis. Use it functionally where speed
matters: ``graphdef, state = nnx.split(model)`` once, then plain ``jax.jit``
over ``state`` with ``nnx.merge`` inside.

Shape suffixes: B batch, T query length, S key length (cache length),
D d_model, N query heads, K kv heads, G = N // K, H head_dim, F mlp, V vocab.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from rlpt.attention import attention, attention_mask, rope_frequencies
from rlpt.attention.decode import sharded_decode_attention
from rlpt.attention.rope import apply_rope_with_frequencies
from rlpt.models.cache import KVCache, LayerKV, attention_with_lse, write_kv
from rlpt.models.adapted import LoraWeight
from rlpt.config.model import ModelConfig
from rlpt.sharding import constrain


def project(eq: str, x, w, dtype):
  """``einsum(eq, x, w)``, both operands in ``dtype``, accumulated in fp32 and
  rounded once: no backend widens a bf16 weight to an fp32 copy first. A
  LoRA-adapted weight (rlpt.models.adapted.LoraWeight) adds its adapters'
  product, factored."""
  adapted = isinstance(w, LoraWeight)
  y = jnp.einsum(eq, x.astype(dtype), (w.w if adapted else w).astype(dtype),
                 preferred_element_type=jnp.float32)
  if adapted:
    y = y + w.delta(eq, x, dtype)
  return y.astype(dtype)


def _param(rngs: nnx.Rngs, shape, axes, scale: float) -> nnx.Param:
  return nnx.Param(jax.random.normal(rngs.params(), shape, jnp.float32) * scale, axes=axes)


class RMSNorm(nnx.Module):
  """RMS norm over the last axis in fp32, scaled by (offset + scale).

  ``offset`` 1.0 is Gemma's parameterisation (the stored weight is scale - 1,
  initialised at 0); 0.0 is Llama's.
  """

  def __init__(self, dim: int, eps: float, offset: float = 0.0, axes=("embed",)):
    self.scale = nnx.Param(jnp.full((dim,), 1.0 - offset, jnp.float32), axes=axes)
    self.eps = eps
    self.offset = offset

  def __call__(self, x):
    x32 = x.astype(jnp.float32)
    y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    scale = self.scale[...] + self.offset if self.offset else self.scale[...]
    return (y * scale).astype(x.dtype)


def apply_rope(x_BxTxNxH: jax.Array, positions_BxT: jax.Array, theta: float,
               freq_H2: jax.Array | None = None) -> jax.Array:
  """Rotary embedding, rotating the two halves of each head (Llama layout).

  ``freq_H2`` overrides the frequencies derived from ``theta`` (RoPE scaling).
  """
  h = x_BxTxNxH.shape[-1]
  if freq_H2 is None:
    freq_H2 = theta ** (-jnp.arange(0, h, 2, dtype=jnp.float32) / h)
  return apply_rope_with_frequencies(x_BxTxNxH, positions_BxT, freq_H2)


def dense_attention(q_BxTxNxH, k_BxSxKxH, v_BxSxKxH, mask_BxTxS, scale: float | None = None,
                    softcap: float = 0.0, kv_heads_major: bool = False) -> jax.Array:
  """Softmax attention in fp32 with grouped query heads. Returns [B, T, N, H].

  ``scale`` multiplies the scores (default head_dim**-0.5); ``softcap`` > 0
  maps them to softcap * tanh(scores / softcap) before masking (Gemma2).
  ``kv_heads_major``: keys [B, K, H, S] and values [B, K, S, H] (a KVCache layer).
  """
  b, t, n, h = q_BxTxNxH.shape
  if kv_heads_major and not softcap:
    # A cache layer is read as stored (bf16 or fp32) with fp32 accumulation.
    out, _ = attention_with_lse(q_BxTxNxH, LayerKV(k_BxSxKxH, v_BxSxKxH), mask_BxTxS, scale)
    return out.astype(q_BxTxNxH.dtype)
  k_eq, kv = ("bkhs", "bksh") if kv_heads_major else ("bskh", "bskh")
  kh = k_BxSxKxH.shape[1 if kv_heads_major else 2]
  q = q_BxTxNxH.reshape(b, t, kh, n // kh, h).astype(jnp.float32)
  scores_BxKxGxTxS = jnp.einsum(f"btkgh,{k_eq}->bkgts", q, k_BxSxKxH.astype(jnp.float32))
  scores_BxKxGxTxS *= h ** -0.5 if scale is None else scale
  if softcap:
    scores_BxKxGxTxS = jnp.tanh(scores_BxKxGxTxS / softcap) * softcap
  big_neg = jnp.finfo(jnp.float32).min
  scores_BxKxGxTxS = jnp.where(mask_BxTxS[:, None, None], scores_BxKxGxTxS, big_neg)
  probs = jax.nn.softmax(scores_BxKxGxTxS, axis=-1)
  out = jnp.einsum(f"bkgts,{kv}->btkgh", probs, v_BxSxKxH.astype(jnp.float32))
  return out.reshape(b, t, n, h).astype(q_BxTxNxH.dtype)


class Attention(nnx.Module):

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, layer: int = 0):
    d, n, k, h = cfg.d_model, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    self.cfg = cfg
    self.window = cfg.window(layer)
    # Gemma3: sliding-window layers rotate with their own (unscaled) base.
    local = bool(self.window and cfg.rope_local_theta)
    self.rope_theta = cfg.rope_local_theta if local else cfg.rope_theta
    self.rope_scaling = None if local or cfg.rope_scaling.kind == "none" else cfg.rope_scaling
    self.wq = _param(rngs, (d, n, h), ("embed", "heads", "head_dim"), d ** -0.5)
    self.wk = _param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), d ** -0.5)
    self.wv = _param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), d ** -0.5)
    self.wo = _param(rngs, (n, h, d), ("heads", "head_dim", "embed"),
                     (n * h) ** -0.5 / (2 * cfg.num_layers) ** 0.5)
    if cfg.qkv_bias:
      self.bq = nnx.Param(jnp.zeros((n, h), jnp.float32), axes=("heads", "head_dim"))
      self.bk = nnx.Param(jnp.zeros((k, h), jnp.float32), axes=("kv_heads", "head_dim"))
      self.bv = nnx.Param(jnp.zeros((k, h), jnp.float32), axes=("kv_heads", "head_dim"))
    if cfg.qk_norm:
      self.q_norm = RMSNorm(h, cfg.norm_eps, cfg.norm_offset, axes=("head_dim",))
      self.k_norm = RMSNorm(h, cfg.norm_eps, cfg.norm_offset, axes=("head_dim",))

  def _rope(self, x_BxTxNxH, positions_BxT):
    if self.rope_scaling is None:
      return apply_rope(x_BxTxNxH, positions_BxT, self.rope_theta)
    freq_H2 = rope_frequencies(x_BxTxNxH.shape[-1], self.rope_theta, self.rope_scaling)
    return apply_rope(x_BxTxNxH, positions_BxT, self.rope_theta, freq_H2)

  def _kernel_cached(self, q, k, v, positions_BxT, cache_kv, write_index_B, window):
    """Cached attention without a mask (long-context sampling; see __call__)."""
    cfg = self.cfg
    ck = write_kv(cache_kv[0], k, write_index_B, keys=True)
    cv = write_kv(cache_kv[1], v, write_index_B)
    kw = dict(window=window, num_sinks=cfg.attention_sinks, block_size=cfg.attention_block_size)
    b, t = positions_BxT.shape
    if t > 1:
      # Prefill into an empty cache: the keys are exactly this block's tokens.
      out = attention(q, k, v, q_positions=positions_BxT, kv_positions=positions_BxT,
                      impl=cfg.attention_impl, **kw)
    else:
      s = cv.shape[2]
      slots_BxS = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
      written_BxS = slots_BxS <= positions_BxT[:, -1:]
      mesh = jax.sharding.get_abstract_mesh()
      seq = dict(mesh.shape).get("sequence", 1) if mesh is not None and mesh.shape else 1
      # The kernels take keys as [B, S, K, H].
      ck_s, cv_s = jnp.transpose(ck, (0, 3, 1, 2)), jnp.swapaxes(cv, 1, 2)
      if cfg.attention_impl == "ring" and seq > 1:
        out = sharded_decode_attention(q, ck_s, cv_s, q_positions=positions_BxT,
                                       kv_positions=slots_BxS, kv_valid=written_BxS, mesh=mesh,
                                       **kw)
      else:
        out = attention(q, ck_s, cv_s, q_positions=positions_BxT, kv_positions=slots_BxS,
                        kv_valid=written_BxS, impl="blockwise" if window is None else "sparse",
                        **kw)
    return out, (ck, cv)

  def __call__(self, x_BxTxD, positions_BxT, mask_BxTxS, cache_kv, write_index_B, attend=None):
    """Self-attention; with a cache, writes this block's K/V at write_index_B.

    ``attend``: a cache layout's attention (``attend(cache, q, k, v,
    positions) -> (out, cache)``, rlpt.sampling.fast): the projections,
    norms and RoPE are this block's, the cache and its attention the
    layout's; ``cache_kv`` is then the layout's cache and is returned updated.

    Without a cache, keys are this block's own tokens (training, scoring).
    There, unless the config keeps the default dense attention without a
    window, rlpt.attention masks by positions_BxT (causal, window, sinks) and
    mask_BxTxS is not consulted: callers pass causal_mask(positions, positions).
    With a cache the attention is dense over mask_BxTxS, narrowed to the window
    assuming cache slot s holds position s (as the sampler writes it).

    Long-context sampling (a cache and mask_BxTxS None, for configs whose
    attention_impl is not "dense"): no [T, S] mask is ever built. A prefill
    (T > 1, into an empty cache from slot 0) attends within its own tokens
    with the configured kernel (blockwise, sparse, or ring over the
    `sequence` axis); a decode step attends to the written cache slots with
    the blockwise kernel, or, when the cache is sharded on a `sequence` mesh
    axis, each device attends to its shard and the partials are merged by
    log-sum-exp (rlpt.attention.decode).
    Returns (y_BxTxD, (k_BxSxKxH, v_BxSxKxH) or None).
    """
    cfg = self.cfg
    q, k, v = self._qkv(x_BxTxD, positions_BxT)
    new_kv = None
    window = self.window or None
    scale = cfg.attn_scale or None
    if attend is not None:
      if window or cfg.attn_logit_softcap:
        raise ValueError("cache layouts attend over every cached position without a soft cap; "
                         f"this layer has window {window}, attn_logit_softcap "
                         f"{cfg.attn_logit_softcap} (use rlpt.sampling.Sampler).")
      if scale is not None:  # layouts scale by head_dim**-0.5: fold the rest into q
        q = q * jnp.asarray(scale * cfg.head_dim ** 0.5, q.dtype)
      out, new_kv = attend(cache_kv, q, k, v, positions_BxT)
    elif cache_kv is not None and mask_BxTxS is None:
      if scale is not None:
        q = q * jnp.asarray(scale * cfg.head_dim ** 0.5, q.dtype)
      out, new_kv = self._kernel_cached(q, k, v, positions_BxT, cache_kv, write_index_B, window)
    elif cache_kv is None and (cfg.attention_impl != "dense" or window) and not cfg.attn_logit_softcap:
      if scale is not None:  # the kernels scale by head_dim**-0.5: fold the rest into q
        q = q * jnp.asarray(scale * cfg.head_dim ** 0.5, q.dtype)
      out = attention(q, k, v, q_positions=positions_BxT, kv_positions=positions_BxT,
                      impl=cfg.attention_impl, window=window, num_sinks=cfg.attention_sinks,
                      block_size=cfg.attention_block_size)
    else:
      out, new_kv = self._dense(q, k, v, positions_BxT, mask_BxTxS, cache_kv, write_index_B,
                                window, scale)
    y = project("btnh,nhd->btd", out, self.wo[...], cfg.jnp_dtype)
    return y, new_kv

  def _qkv(self, x_BxTxD, positions_BxT):
    """This block's queries, keys and values: projections, biases, norms, RoPE."""
    cfg = self.cfg
    dt = cfg.jnp_dtype
    q = project("btd,dnh->btnh", x_BxTxD, self.wq[...], dt)
    k = project("btd,dkh->btkh", x_BxTxD, self.wk[...], dt)
    v = project("btd,dkh->btkh", x_BxTxD, self.wv[...], dt)
    if cfg.qkv_bias:
      q = q + self.bq[...].astype(dt)
      k = k + self.bk[...].astype(dt)
      v = v + self.bv[...].astype(dt)
    if cfg.qk_norm:
      q, k = self.q_norm(q), self.k_norm(k)
    q = self._rope(q, positions_BxT)
    k = self._rope(k, positions_BxT)
    return constrain(q, ("batch", "seq", "heads", "head_dim")), k, v

  def _dense(self, q, k, v, positions_BxT, mask_BxTxS, cache_kv, write_index_B, window, scale):
    """Mask-based dense attention (the default, soft-capped layers, the plain
    sampler's cache, written here at write_index_B); (out, new cache or None)."""
    cfg, new_kv = self.cfg, None
    kv_heads_major = cache_kv is not None
    if cache_kv is not None:
      ck = write_kv(cache_kv[0], k, write_index_B, keys=True)
      cv = write_kv(cache_kv[1], v, write_index_B)
      k, v, new_kv = ck, cv, (ck, cv)
      if window:
        slots_BxS = jnp.broadcast_to(jnp.arange(cv.shape[2]), (cv.shape[0], cv.shape[2]))
        mask_BxTxS &= attention_mask(positions_BxT, slots_BxS, None, window,
                                     cfg.attention_sinks)
    elif window:  # soft-capped windowed layer without a cache (Gemma2)
      mask_BxTxS &= attention_mask(positions_BxT, positions_BxT, None, window,
                                   cfg.attention_sinks)
    out = dense_attention(q, k, v, mask_BxTxS, scale, cfg.attn_logit_softcap, kv_heads_major)
    return out, new_kv


class MLP(nnx.Module):

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    d, f = cfg.d_model, cfg.mlp_dim
    self.cfg = cfg
    self.w_gate = _param(rngs, (d, f), ("embed", "mlp"), d ** -0.5)
    self.w_up = _param(rngs, (d, f), ("embed", "mlp"), d ** -0.5)
    self.w_down = _param(rngs, (f, d), ("mlp", "embed"), f ** -0.5 / (2 * cfg.num_layers) ** 0.5)

  def __call__(self, x_BxTxD):
    dt = self.cfg.jnp_dtype
    # Gate and up as two products. Stacking them into one [D, 2F] weight
    # copies both weights on every call (an interleaved copy that took 9% of
    # SmolLM2's LoRA update and 14% of its reference pass on this CPU);
    # two products cost less than the copy and one product together
    # (benchmarks/rl_step.py --profile, docs/throughput.md).
    gate = project("btd,df->btf", x_BxTxD, self.w_gate[...], dt)
    up = project("btd,df->btf", x_BxTxD, self.w_up[...], dt)
    if self.cfg.mlp_activation == "gelu_tanh":
      act = jax.nn.gelu(gate, approximate=True)
    else:
      act = jax.nn.silu(gate)
    h = constrain(act * up, ("batch", "seq", "mlp"))
    return project("btf,fd->btd", h, self.w_down[...], dt)


class Block(nnx.Module):

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs, layer: int = 0):
    off = cfg.norm_offset
    self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps, off)
    self.attn = Attention(cfg, rngs, layer)
    self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps, off)
    self.mlp = MLP(cfg, rngs)
    self.post_norms = cfg.post_norms
    if cfg.post_norms:
      self.attn_post_norm = RMSNorm(cfg.d_model, cfg.norm_eps, off)
      self.mlp_post_norm = RMSNorm(cfg.d_model, cfg.norm_eps, off)

  def __call__(self, x, positions, mask, cache_kv, write_index, attend=None):
    y, new_kv = self.attn(self.attn_norm(x), positions, mask, cache_kv, write_index, attend)
    if self.post_norms:
      y = self.attn_post_norm(y)
    x = x + y
    y = self.mlp(self.mlp_norm(x))
    if self.post_norms:
      y = self.mlp_post_norm(y)
    x = x + y
    return constrain(x, ("batch", "seq", "embed")), new_kv


class Decoder(nnx.Module):
  """Embedding, blocks and final norm: tokens -> hidden states [B, T, D]."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.cfg = cfg
    self.embed = _param(rngs, (cfg.vocab_size, cfg.d_model), ("vocab", "embed"), 1.0)
    self.blocks = nnx.List([Block(cfg, rngs, i) for i in range(cfg.num_layers)])
    self.final_norm = RMSNorm(cfg.d_model, cfg.norm_eps, cfg.norm_offset)

  def __call__(self, tokens_BxT, positions_BxT, mask_BxTxS, cache: KVCache | None = None,
               write_index_B: jax.Array | None = None, layout=None):
    """``layout``: a cache layout (``attend(cache, layer, q, k, v, positions)``,
    rlpt.sampling.fast) that owns ``cache``; the blocks delegate their
    attention to it layer by layer."""
    x = jnp.take(self.embed[...], tokens_BxT, axis=0).astype(self.cfg.jnp_dtype)
    if self.cfg.embed_scale:  # Gemma: sqrt(d_model), rounded to the activation dtype
      x = x * jnp.asarray(self.cfg.d_model ** 0.5, x.dtype)
    x = constrain(x, ("batch", "seq", "embed"))
    if layout is not None:
      for i, block in enumerate(self.blocks):
        x, cache = block(x, positions_BxT, None, cache, None,
                         functools.partial(_layer_attend, layout.attend, i))
      return self.final_norm(x), cache
    ks, vs = (None, None) if cache is None else (list(cache.k), list(cache.v))
    for i, block in enumerate(self.blocks):
      layer_kv = None if cache is None else (ks[i], vs[i])
      x, kv = block(x, positions_BxT, mask_BxTxS, layer_kv, write_index_B)
      if kv is not None:
        ks[i], vs[i] = kv
    if cache is not None:
      cache = KVCache(tuple(ks), tuple(vs))
    return self.final_norm(x), cache


def _layer_attend(attend, layer, cache, q, k, v, positions):
  return attend(cache, layer, q, k, v, positions)


class Transformer(nnx.Module):
  """The policy: Decoder plus an output head producing fp32 logits."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.cfg = cfg
    self.decoder = Decoder(cfg, rngs)
    if not cfg.tie_embeddings:
      self.lm_head = _param(rngs, (cfg.d_model, cfg.vocab_size), ("embed", "vocab"),
                            cfg.d_model ** -0.5)

  def __call__(self, tokens_BxT, positions_BxT, mask_BxTxS, cache=None, write_index_B=None,
               layout=None, with_logits: bool = True):
    """Returns (logits_BxTxV in fp32, or None without ``with_logits``; updated
    cache or None). ``layout``: as in `Decoder`."""
    h_BxTxD, cache = self.decoder(tokens_BxT, positions_BxT, mask_BxTxS, cache, write_index_B,
                                  layout)
    if not with_logits:
      return None, cache
    return self.head(h_BxTxD), cache

  def head(self, h_BxTxD: jax.Array) -> jax.Array:
    """fp32 logits [B, T, V] of final hidden states: the output projection (tied
    or not; like every projection in the compute dtype, accumulated in fp32)
    and the final soft cap. Scoring passes call it on chunks of the sequence
    (rlpt.scoring) so the whole [T, V] block never exists."""
    dt, h = self.cfg.jnp_dtype, h_BxTxD.astype(self.cfg.jnp_dtype)
    f32 = dict(preferred_element_type=jnp.float32)
    if self.cfg.tie_embeddings:
      # Tied explicitly (no shared Variable) so the model also works in tree mode.
      logits = jnp.einsum("btd,vd->btv", h, self.decoder.embed[...].astype(dt), **f32)
      if self.cfg.scale_tied_head:
        logits = logits * self.cfg.d_model ** -0.5
    else:
      logits = jnp.einsum("btd,dv->btv", h, self.lm_head[...].astype(dt), **f32)
    if self.cfg.final_logit_softcap:
      cap = self.cfg.final_logit_softcap
      logits = jnp.tanh(logits / cap) * cap
    return constrain(logits, ("batch", "seq", "vocab"))


class ValueModel(nnx.Module):
  """Critic: the same trunk plus a scalar head. Returns values [B, T] in fp32."""

  def __init__(self, cfg: ModelConfig, rngs: nnx.Rngs):
    self.cfg = cfg
    self.decoder = Decoder(cfg, rngs)
    self.head = nnx.Param(jnp.zeros((cfg.d_model,), jnp.float32), axes=("embed",))
    self.bias = nnx.Param(jnp.zeros((), jnp.float32), axes=())

  def __call__(self, tokens_BxT, positions_BxT, mask_BxTxS):
    h_BxTxD, _ = self.decoder(tokens_BxT, positions_BxT, mask_BxTxS)
    return jnp.einsum("btd,d->bt", h_BxTxD.astype(jnp.float32), self.head[...]) + self.bias[...]
