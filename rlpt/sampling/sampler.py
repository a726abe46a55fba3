"""Batched autoregressive sampling on device.

Prompts of different lengths are right-padded into one [B, P] buffer and every
row keeps its true positions (row b's token i sits at position i), so the
sampler computes exactly what a full forward pass over prompt + completion
computes. A jitted prefill fills the preallocated KV cache; a jitted
``lax.while_loop`` then decodes one token per row per iteration, writing each
row's key/value at that row's own position, until every row has emitted a stop
token or ``max_new_tokens`` is reached. The cache and loop state are donated.
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


class _DecodeState(NamedTuple):
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
    length = p + self.max_new_tokens
    if self.long_context:
      # Whole blocks, divisible by any sequence-axis size up to 128.
      length = -(-length // 128) * 128
    cache = init_cache(self.model_cfg, b, length)
    cache = KVCache(tuple(constrain(c, K_CACHE_AXES) for c in cache.k),
                    tuple(constrain(c, KV_CACHE_AXES) for c in cache.v))
    logits_BxV, cache = _prefill(self, params, jnp.asarray(prompts_BxP, jnp.int32),
                                 jnp.asarray(prompt_lengths_B, jnp.int32), cache)
    state = _DecodeState(
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
    state = _decode(self, params, state, sampling)
    return SampleOutput(state.tokens_BxN, state.logprobs_BxN, state.lengths_B)


@functools.partial(jax.jit, static_argnums=0, donate_argnums=4)
def _prefill(sampler: Sampler, params, prompts_BxP, lengths_B, cache):
  model = nnx.merge(sampler.graphdef, params)
  b, p = prompts_BxP.shape
  s = cache.length
  positions_BxP = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (b, p))
  key_pos_BxS = jnp.broadcast_to(jnp.arange(s, dtype=jnp.int32), (b, s))
  mask = (None if sampler.long_context else
          causal_mask(positions_BxP, key_pos_BxS, key_pos_BxS < lengths_B[:, None]))
  logits_BxPxV, cache = model(prompts_BxP, positions_BxP, mask, cache,
                              jnp.zeros((b,), jnp.int32))
  last = jnp.take_along_axis(logits_BxPxV, (lengths_B - 1)[:, None, None], axis=1)[:, 0]
  return last, cache


@functools.partial(jax.jit, static_argnums=(0, 3), donate_argnums=2)
def _decode(sampler: Sampler, params, state: _DecodeState, sampling: SamplingParams):
  model = nnx.merge(sampler.graphdef, params)
  b = state.done_B.shape[0]
  s_len = state.cache.length
  key_pos_BxS = jnp.broadcast_to(jnp.arange(s_len, dtype=jnp.int32), (b, s_len))
  stop_ids = jnp.asarray(sampler.stop_ids, jnp.int32)

  def cond(s: _DecodeState):
    return (s.step < sampler.max_new_tokens) & ~jnp.all(s.done_B)

  def body(s: _DecodeState):
    rng, sub = jax.random.split(s.rng)
    tok_B, logp_B = sample_token(sub, s.logits_BxV, sampling)
    tok_B = jnp.where(s.done_B, sampler.pad_id, tok_B)
    logp_B = jnp.where(s.done_B, 0.0, logp_B)
    tokens = jax.lax.dynamic_update_slice_in_dim(s.tokens_BxN, tok_B[:, None], s.step, axis=1)
    logprobs = jax.lax.dynamic_update_slice_in_dim(s.logprobs_BxN, logp_B[:, None], s.step, axis=1)
    lengths = s.lengths_B + (~s.done_B).astype(jnp.int32)
    done = s.done_B | jnp.isin(tok_B, stop_ids)
    pos_Bx1 = s.position_B[:, None]
    mask = None if sampler.long_context else causal_mask(pos_Bx1, key_pos_BxS)
    logits_Bx1xV, cache = model(tok_B[:, None], pos_Bx1, mask, s.cache, s.position_B)
    return _DecodeState(s.step + 1, tokens, logprobs, done, lengths, s.position_B + 1,
                        logits_Bx1xV[:, 0], cache, rng)

  return jax.lax.while_loop(cond, body, state)
