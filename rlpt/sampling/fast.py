"""The policy's forward over a KV cache with a pluggable cache layout.

The fast sampling paths (int8 KV cache, prefix-shared group cache,
speculative decoding) need attention over cache layouts of their own. They
run the model itself (``rlpt.models.Transformer`` with ``layout=``: its
embedding, projections, biases, QK-norms, RoPE, MLP, norms and head, so every
model option is honoured in one place) and the model delegates only the cache
and its attention to a *layout*: a small hashable object with

  init(cfg, batch, length) -> cache
  prefill(graphdef, cfg, params, prompts_PxL, lengths_P, suffix_len) -> cache
  attend(cache, layer, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, positions_BxT) -> (out, cache)
  grow(cache, extra) -> cache with ``extra`` more slots after the prompt
  group_size: rows per prompt (1, or G for a prefix-shared group)

``FlatLayout`` (here) keeps one cache row per sequence with slot = position,
in fp32 or int8; ``rlpt.sampling.prefix.PrefixLayout`` shares a prompt's
cache across its group. Because slot = position (or position - prefix
length), rolling a row back is only moving its position: entries beyond it
are masked by position and overwritten by the next write.

``FastSampler`` is the plain (one token per step) decode loop over any
layout, with int8 or fp32 weights, in ``decode_phases`` stages over a growing
cache (see rlpt.sampling.sampler); ``rlpt.sampling.speculative`` adds a draft.

Shape suffixes: P prompts, B rows (P * group_size), T new tokens, S cache
slots, L layers, N query heads, K kv heads, H head_dim, V vocab.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlpt.models import KVCache, ModelConfig, init_cache, write_kv
from rlpt.models.cache import LayerKV, attention_with_lse
from rlpt.models.decode_kernel import check_kernel, shared_mask_attention
from rlpt.sampling.logits import SamplingParams, sample_token
from rlpt.sampling.quant import (Int8KVCache, QuantizedState, as_params, init_int8_cache, quantize_kv)
from rlpt.sampling.sampler import SampleOutput, check_decode_phases, decode_bounds, grow_slots

AnyKV = KVCache | Int8KVCache


def write_layer(cache: AnyKV, layer: int, k_BxTxKxH: jax.Array, v_BxTxKxH: jax.Array,
                slot_B: jax.Array) -> AnyKV:
  """Writes T new keys/values of each row at that row's slot [B], or at one
  slot for every row (a scalar; see rlpt.models.write_kv), in place under jit."""

  def put(bufs, new_BxTx, keys=False):
    if new_BxTx.ndim == 3:  # int8 scales [B, T, K] -> [B, K, S]
      new = write_kv(bufs[layer][..., None], new_BxTx[..., None], slot_B)[..., 0]
    else:
      new = write_kv(bufs[layer], new_BxTx, slot_B, keys=keys)
    return bufs[:layer] + (new,) + bufs[layer + 1:]

  if isinstance(cache, Int8KVCache):
    kq, ks = quantize_kv(k_BxTxKxH)
    vq, vs = quantize_kv(v_BxTxKxH)
    return Int8KVCache(put(cache.k, kq, keys=True), put(cache.v, vq), put(cache.k_scale, ks),
                       put(cache.v_scale, vs))
  return KVCache(put(cache.k, k_BxTxKxH, keys=True), put(cache.v, v_BxTxKxH))


def read_layer(cache: AnyKV, layer: int) -> LayerKV:
  """Layer ``layer`` of a cache, as stored."""
  if isinstance(cache, Int8KVCache):
    return LayerKV(cache.k[layer], cache.v[layer], cache.k_scale[layer], cache.v_scale[layer])
  return LayerKV(cache.k[layer], cache.v[layer])


def cached_forward(graphdef: nnx.GraphDef, params: nnx.State, tokens_BxT: jax.Array,
                   positions_BxT: jax.Array, cache, layout, with_logits: bool = True):
  """The Transformer's own forward with ``layout`` owning the cache and its attention.

  Returns (logits [B, T, V] fp32 or None, cache). ``params`` must be fp32
  (``as_params`` first), so that a QuantizedState is dequantized once per
  jitted call, not once per decode step.
  """
  return nnx.merge(graphdef, params)(tokens_BxT, positions_BxT, None, cache, layout=layout,
                                     with_logits=with_logits)


def check_model_cfg(cfg: ModelConfig):
  """The model runs every option itself; the layouts attend over every cached
  position, so a model with sliding-window layers or soft-capped attention
  logits is refused here, before anything is compiled."""
  windows = cfg.attention_window or any(cfg.layer_windows)
  if windows or cfg.attn_logit_softcap:
    raise ValueError(f"the fast sampling paths attend over every cached position without a soft "
                     f"cap; this model has attention_window {cfg.attention_window}, "
                     f"layer_windows {tuple(cfg.layer_windows)}, attn_logit_softcap "
                     f"{cfg.attn_logit_softcap} (use rlpt.sampling.Sampler).")


@dataclasses.dataclass(frozen=True)
class FlatLayout:
  """One cache row per sequence, slot = position; fp32 or int8 (``kv_int8``).
  ``decode_kernel``: how a decode step attends (rlpt.models.decode_kernel)."""

  kv_int8: bool = False
  group_size: int = 1
  decode_kernel: str = "xla"

  def __post_init__(self):
    check_kernel(self.decode_kernel)
    if self.group_size != 1:
      raise ValueError(f"FlatLayout has one row per prompt; got group_size {self.group_size} "
                       "(repeat the prompts, or use PrefixLayout).")

  def init(self, cfg: ModelConfig, batch: int, length: int) -> AnyKV:
    return init_int8_cache(cfg, batch, length) if self.kv_int8 else init_cache(cfg, batch, length)

  def grow(self, cache: AnyKV, extra: int) -> AnyKV:
    return grow_slots(cache, extra)

  def attend(self, cache: AnyKV, layer, q_BxTxNxH, k_BxTxKxH, v_BxTxKxH, positions_BxT):
    cache = write_layer(cache, layer, k_BxTxKxH, v_BxTxKxH, positions_BxT[:, 0])
    kv = read_layer(cache, layer)
    mask_BxTxS = jnp.arange(kv.length)[None, None, :] <= positions_BxT[:, :, None]
    if q_BxTxNxH.shape[1] == 1:  # decode: one query a row, so one key mask a row
      out, _ = shared_mask_attention(q_BxTxNxH, kv, mask_BxTxS[:, 0], self.decode_kernel)
    else:
      out, _ = attention_with_lse(q_BxTxNxH, kv, mask_BxTxS)
    return out, cache

  def prefill(self, graphdef, cfg: ModelConfig, params, prompts_PxL, lengths_P,
              suffix_len: int) -> AnyKV:
    """Caches the prompts; causal masking by position alone is enough because a
    row's slots below its length hold its own prompt, and padded slots are
    overwritten before any query at their position runs."""
    del lengths_P
    p, l = prompts_PxL.shape
    cache = self.init(cfg, p, l + suffix_len)
    pos = jnp.broadcast_to(jnp.arange(l, dtype=jnp.int32), (p, l))
    _, cache = cached_forward(graphdef, params, prompts_PxL, pos, cache, self,
                              with_logits=False)
    return cache


class DecodeLoopState(NamedTuple):
  """The generate loop's carry (one decode step maps it to the next)."""

  step: jax.Array
  tokens_BxN: jax.Array
  logprobs_BxN: jax.Array
  done_B: jax.Array
  lengths_B: jax.Array
  position_B: jax.Array   # position of the pending token (sampled, not yet cached)
  pending_B: jax.Array
  cache: object
  rng: jax.Array


@dataclasses.dataclass(frozen=True)
class FastSampler:
  """``Sampler`` with a pluggable cache layout and int8 weights.

  ``generate`` takes P prompts and returns P * layout.group_size rows (row
  p * G + g is sample g of prompt p). ``params`` may be an nnx.State or a
  ``QuantizedState``. Same rng stream as ``Sampler``, so with a FlatLayout
  and fp32 weights it draws the same tokens (up to fp32 summation order).
  """

  graphdef: nnx.GraphDef
  model_cfg: ModelConfig
  max_prompt_len: int
  max_new_tokens: int
  pad_id: int
  stop_ids: tuple[int, ...]
  layout: object = FlatLayout()
  decode_phases: int = 1

  def __post_init__(self):
    check_model_cfg(self.model_cfg)
    check_decode_phases(self.decode_phases, self.max_new_tokens)

  def generate(self, params: nnx.State | QuantizedState, prompts_PxL, lengths_P,
               rng: jax.Array, sampling: SamplingParams) -> SampleOutput:
    check_prompts(prompts_PxL, self.max_prompt_len)
    return _fast_generate(self, params, jnp.asarray(prompts_PxL, jnp.int32),
                          jnp.asarray(lengths_P, jnp.int32), rng, sampling)


def check_prompts(prompts_PxL, max_prompt_len: int):
  if prompts_PxL.shape[1] > max_prompt_len:
    raise ValueError(f"prompt buffer has width {prompts_PxL.shape[1]}; this sampler allows "
                     f"at most {max_prompt_len}.")


def start_rows(prompts_PxL, lengths_P, group_size: int):
  """Per-row (pending token, its position): the last prompt token, not yet cached."""
  last_P = jnp.take_along_axis(prompts_PxL, (lengths_P - 1)[:, None], axis=1)[:, 0]
  return jnp.repeat(last_P, group_size), jnp.repeat(lengths_P - 1, group_size)


def decode_step(sampler: FastSampler, params, s: DecodeLoopState, sampling: SamplingParams):
  """One decode step of every row: cache the pending tokens, sample the next.

  The body of the generate loop, and the program benchmarks/decode_bytes.py
  measures. ``params`` as ``cached_forward`` takes them.
  """
  logits, cache = cached_forward(sampler.graphdef, params, s.pending_B[:, None],
                                 s.position_B[:, None], s.cache, sampler.layout)
  rng, sub = jax.random.split(s.rng)
  tok_B, logp_B = sample_token(sub, logits[:, 0], sampling)
  tok_B = jnp.where(s.done_B, sampler.pad_id, tok_B)
  logp_B = jnp.where(s.done_B, 0.0, logp_B)
  tokens = jax.lax.dynamic_update_slice_in_dim(s.tokens_BxN, tok_B[:, None], s.step, axis=1)
  logprobs = jax.lax.dynamic_update_slice_in_dim(s.logprobs_BxN, logp_B[:, None], s.step, 1)
  active = ~s.done_B
  stop_ids = jnp.asarray(sampler.stop_ids, jnp.int32)
  # Finished rows keep stepping (their writes land past their own positions,
  # where no query of theirs looks): every row's position moves with the step,
  # which an ``aligned`` layout relies on to write all rows at one slot.
  return DecodeLoopState(s.step + 1, tokens, logprobs, s.done_B | jnp.isin(tok_B, stop_ids),
                         s.lengths_B + active, s.position_B + 1, tok_B, cache, rng)


@functools.partial(jax.jit, static_argnums=(0, 5))
def _fast_generate(sampler: FastSampler, params, prompts_PxL, lengths_P, rng,
                   sampling: SamplingParams) -> SampleOutput:
  params = as_params(params)
  layout, n_new = sampler.layout, sampler.max_new_tokens
  # Step t writes suffix slot (len - 1 - prompt width) + t < t + 1: each phase's
  # cache holds the steps before its bound (the last one n_new + 1 slots).
  bounds = decode_bounds(n_new, sampler.decode_phases)
  cache = layout.prefill(sampler.graphdef, sampler.model_cfg, params, prompts_PxL, lengths_P,
                         bounds[0] + 1)
  pending_B, position_B = start_rows(prompts_PxL, lengths_P, layout.group_size)
  b = pending_B.shape[0]
  body = functools.partial(decode_step, sampler, params, sampling=sampling)
  state = DecodeLoopState(jnp.zeros((), jnp.int32),
                          jnp.full((b, n_new), sampler.pad_id, jnp.int32),
                          jnp.zeros((b, n_new), jnp.float32), jnp.zeros((b,), bool),
                          jnp.zeros((b,), jnp.int32), position_B, pending_B, cache, rng)
  for j, end in enumerate(bounds):
    if j:
      state = state._replace(cache=layout.grow(state.cache, end - bounds[j - 1]))
    state = jax.lax.while_loop(lambda s, end=end: (s.step < end) & ~jnp.all(s.done_B), body,
                               state)
  return SampleOutput(state.tokens_BxN, state.logprobs_BxN, state.lengths_B)
