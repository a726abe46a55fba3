"""Batched autoregressive sampling on device.

Prompts of different lengths are right-padded into one [B, P] buffer and every
row keeps its true positions (row b's token i sits at position i), so the
sampler computes exactly what a full forward pass over prompt + completion
computes. A jitted prefill fills the preallocated KV cache; a jitted
``lax.while_loop`` then decodes one token per row per iteration, writing each
row's key/value at that row's own position, until every row has emitted a stop
token or ``max_new_tokens`` is reached. The cache and loop state are donated.

Decode phases (``decode_phases`` > 1): a decode step reads every slot of the
cache, written or not, so a cache sized for the last token makes the early
steps read mostly empty slots. With phases the loop runs in stages, each over
a cache just long enough for its steps, grown (zero-padded, once per phase)
before the next: of the slots past the prompt, attention then reads about
(k + 1) / 2k of those it would otherwise. The tokens and log-probs are the same (unwritten slots are
masked either way); each phase compiles its own loop body.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlpt.models import KVCache, ModelConfig, causal_mask, init_cache
from rlpt.sharding import constrain
from rlpt.sharding.rules import K_CACHE_AXES, KV_CACHE_AXES
from rlpt.sampling.logits import SamplingParams, sample_token


class SampleOutput(NamedTuple):
  """What a generate call returns (device arrays).

  tokens: [B, N] generated ids; positions after a row's stop token hold pad.
  logprobs: [B, N] log-prob of each generated token under the sampling
    distribution (0 after the stop token).
  lengths: [B] number of generated tokens, the stop token included.
  """

  tokens: jax.Array
  logprobs: jax.Array
  lengths: jax.Array


class DecodeState(NamedTuple):
  """The decode loop's carry."""

  step: jax.Array            # scalar int32: tokens generated so far
  tokens_BxN: jax.Array
  logprobs_BxN: jax.Array
  done_B: jax.Array
  lengths_B: jax.Array       # tokens generated per row, stop token included
  position_B: jax.Array      # where each row's next token goes
  logits_BxV: jax.Array      # distribution for each row's next token
  cache: KVCache
  rng: jax.Array


@dataclasses.dataclass(frozen=True)
class Sampler:
  """Generates completions from a policy's parameters.

  Hashable and immutable: the jitted functions close over it as a static
  argument. ``graphdef`` comes from ``nnx.split(model)``.
  """

  graphdef: nnx.GraphDef
  model_cfg: ModelConfig
  max_prompt_len: int
  max_new_tokens: int
  pad_id: int
  stop_ids: tuple[int, ...]
  decode_phases: int = 1

  def __post_init__(self):
    check_decode_phases(self.decode_phases, self.max_new_tokens)
    if self.decode_phases > 1 and self.long_context:
      raise ValueError(f"decode_phases {self.decode_phases} needs dense attention; this model's "
                       f"attention_impl is '{self.model_cfg.attention_impl}' (its cache is "
                       "whole blocks, sharded over the sequence axis): use decode_phases=1.")

  @property
  def long_context(self) -> bool:
    """Masks by positions inside the attention kernels instead of a [T, S] mask
    (any attention_impl but "dense"); see rlpt.models.Attention."""
    return self.model_cfg.attention_impl != "dense"

  def generate(self, params: nnx.State, prompts_BxP: np.ndarray | jax.Array,
               prompt_lengths_B: np.ndarray | jax.Array, rng: jax.Array,
               sampling: SamplingParams) -> SampleOutput:
    """Samples completions for right-padded prompts (each starting with BOS).

    The prompt buffer width P may be anything up to ``max_prompt_len``; each
    distinct P compiles once, so callers bucket it (see encode_prompts).
    """
    b, p = prompts_BxP.shape
    if p > self.max_prompt_len:
      raise ValueError(f"prompt buffer has width {p}; this sampler allows at most "
                       f"{self.max_prompt_len}.")
    # Step t writes slot lengths_B + t <= p + t; the first phase's cache holds
    # the steps before the first bound.
    length = p + decode_bounds(self.max_new_tokens, self.decode_phases)[0]
    if self.long_context:
      # Whole blocks, divisible by any sequence-axis size up to 128.
      length = -(-length // 128) * 128
    cache = _constrain_cache(init_cache(self.model_cfg, b, length))
    logits_BxV, cache = _prefill(self, params, jnp.asarray(prompts_BxP, jnp.int32),
                                 jnp.asarray(prompt_lengths_B, jnp.int32), cache)
    state = DecodeState(
        step=jnp.zeros((), jnp.int32),
        tokens_BxN=jnp.full((b, self.max_new_tokens), self.pad_id, jnp.int32),
        logprobs_BxN=jnp.zeros((b, self.max_new_tokens), jnp.float32),
        done_B=jnp.zeros((b,), bool),
        lengths_B=jnp.zeros((b,), jnp.int32),
        position_B=jnp.asarray(prompt_lengths_B, jnp.int32),
        logits_BxV=logits_BxV,
        cache=cache,
        rng=rng,
    )
    # One phase updates the donated cache in place; phases grow it, so the
    # first phase's buffers cannot become the output's.
    decode = _decode if self.decode_phases == 1 else _decode_growing
    state = decode(self, params, state, sampling)
    return SampleOutput(state.tokens_BxN, state.logprobs_BxN, state.lengths_B)


def check_decode_phases(phases: int, max_new_tokens: int):
  if not 1 <= phases <= max_new_tokens:
    raise ValueError(f"decode_phases must be in [1, max_new_tokens={max_new_tokens}], "
                     f"got {phases}.")


def auto_decode_phases(max_new_tokens: int) -> int:
  """Decode phases chosen from the shape: one per 16 new tokens, 1 to 8 (a
  phase saves reading the cache slots of tokens not yet generated and costs a
  compiled loop; below 16 tokens per phase the compile outweighs the reads:
  the 128- and 64-token benchmark samplers get 8 and 4, the main job's 24
  tokens 1)."""
  return max(1, min(8, max_new_tokens // 16))


def decode_bounds(max_new_tokens: int, phases: int, multiple: int = 8) -> tuple[int, ...]:
  """The step each decode phase ends before: ``phases`` near-equal stages of
  ``max_new_tokens`` steps, bounds rounded up to ``multiple`` (fewer shapes),
  the last one ``max_new_tokens``."""
  bounds = []
  for j in range(1, phases + 1):
    t = min(max_new_tokens, -(-(max_new_tokens * j // phases) // multiple) * multiple)
    if t > (bounds[-1] if bounds else 0):
      bounds.append(t)
  return tuple(bounds)


def grow_slots(cache, extra: int):
  """``cache`` (KVCache or rlpt.sampling.quant.Int8KVCache) with ``extra`` more
  zero slots at the end of every layer: keys [B, K, H, S] (slots last), values
  [B, K, S, H] and int8 scales [B, K, S] (slots at axis 2)."""
  def pad(x, axis):
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths)
  fields = {name: tuple(pad(x, 3 if name == "k" else 2) for x in getattr(cache, name))
            for name in cache._fields}
  return type(cache)(**fields)


def _constrain_cache(cache: KVCache) -> KVCache:
  return KVCache(tuple(constrain(c, K_CACHE_AXES) for c in cache.k),
                 tuple(constrain(c, KV_CACHE_AXES) for c in cache.v))


@functools.partial(jax.jit, static_argnums=0, donate_argnums=4)
def _prefill(sampler: Sampler, params, prompts_BxP, lengths_B, cache):
  model = nnx.merge(sampler.graphdef, params)
  b, p = prompts_BxP.shape
  s = cache.length
  positions_BxP = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (b, p))
  key_pos_BxS = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
  mask = (None if sampler.long_context else
          causal_mask(positions_BxP, key_pos_BxS, key_pos_BxS < lengths_B[:, None]))
  h_BxPxD, cache = model.decoder(prompts_BxP, positions_BxP, mask, cache,
                                 jnp.zeros((b,), jnp.int32))
  # Only the last prompt position's logits are needed: the head runs on its
  # hidden state alone, not on [B, P, V] (at a 262,144-entry vocabulary, 3.2 GB
  # and a TFLOP for 16 prompts of 192 tokens).
  h_Bx1xD = jnp.take_along_axis(h_BxPxD, (lengths_B - 1)[:, None, None], axis=1)
  return model.head(h_Bx1xD)[:, 0], cache


def _decode_impl(sampler: Sampler, params, state: DecodeState, sampling: SamplingParams):
  model = nnx.merge(sampler.graphdef, params)
  stop_ids = jnp.asarray(sampler.stop_ids, jnp.int32)
  bounds = decode_bounds(sampler.max_new_tokens, sampler.decode_phases)
  for j, end in enumerate(bounds):
    if j:
      state = state._replace(cache=_constrain_cache(grow_slots(state.cache,
                                                               end - bounds[j - 1])))
    state = _decode_phase(sampler, model, state, sampling, stop_ids, end)
  return state


_decode = jax.jit(_decode_impl, static_argnums=(0, 3), donate_argnums=2)
_decode_growing = jax.jit(_decode_impl, static_argnums=(0, 3))


def _decode_phase(sampler: Sampler, model, state: DecodeState, sampling: SamplingParams,
                  stop_ids: jax.Array, end: int) -> DecodeState:
  """Decode steps until step ``end`` (or every row is done) over the cache as it is."""
  def cond(s: DecodeState):
    return (s.step < end) & ~jnp.all(s.done_B)

  body = functools.partial(decode_step, sampler, model, sampling=sampling, stop_ids=stop_ids)
  return jax.lax.while_loop(cond, body, state)


def decode_step(sampler: Sampler, model, s: DecodeState, sampling: SamplingParams,
                stop_ids: jax.Array) -> DecodeState:
  """One decode step of every row: sample from the pending logits, cache the
  token, compute the next logits. The loop's body, and the program
  benchmarks/decode_bytes.py measures."""
  b, s_len = s.done_B.shape[0], s.cache.length
  rng, sub = jax.random.split(s.rng)
  tok_B, logp_B = sample_token(sub, s.logits_BxV, sampling)
  tok_B = jnp.where(s.done_B, sampler.pad_id, tok_B)
  logp_B = jnp.where(s.done_B, 0.0, logp_B)
  tokens = jax.lax.dynamic_update_slice_in_dim(s.tokens_BxN, tok_B[:, None], s.step, axis=1)
  logprobs = jax.lax.dynamic_update_slice_in_dim(s.logprobs_BxN, logp_B[:, None], s.step, axis=1)
  lengths = s.lengths_B + (~s.done_B).astype(jnp.int32)
  done = s.done_B | jnp.isin(tok_B, stop_ids)
  pos_Bx1 = s.position_B[:, None]
  key_pos_BxS = jnp.broadcast_to(jnp.arange(s_len, dtype=jnp.int32), (b, s_len))
  mask = None if sampler.long_context else causal_mask(pos_Bx1, key_pos_BxS)
  logits_Bx1xV, cache = model(tok_B[:, None], pos_Bx1, mask, s.cache, s.position_B)
  return DecodeState(s.step + 1, tokens, logprobs, done, lengths, s.position_B + 1,
                      logits_Bx1xV[:, 0], cache, rng)
