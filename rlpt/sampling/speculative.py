"""Speculative decoding: a draft proposes gamma tokens, the target verifies them at once.

Exact rejection sampling (Leviathan et al. 2023; Chen et al. 2023). With p
the target's and q the draft's *processed* distributions (temperature,
top-k, top-p: ``processed_logprobs`` for both), draft token x_j ~ q_j is
accepted with probability min(1, p_j(x_j) / q_j(x_j)); at the first
rejection j the row emits a token from normalize(max(0, p_j - q_j)) and
stops; if all gamma are accepted it emits a bonus token from p_gamma. Every
emitted token is therefore distributed exactly as the target's sampling
distribution, and a step accepts each draft with probability
sum_x min(p(x), q(x)). Greedy (temperature 0) is the deterministic limit:
accept while the draft equals the target's argmax, then emit the argmax.

The emitted tokens' log-probs are the target's processed log-probs from the
verification pass, so RL importance ratios stay exact.

Batched with per-row acceptance: each row keeps its own position; one
iteration runs gamma + 1 one-token draft steps and one (gamma + 1)-token
target step for every row, and row b advances by 1 + (its accepted count).
Rollback is free: both caches store slot = position (see
``rlpt.sampling.fast``), so rejected entries are masked by position and
overwritten by the next iteration.

Per-row state: the *pending* token (emitted, not yet in either cache) and
its position. An iteration feeds [pending, x_0..x_{gamma-1}] to the target;
the draft's extra (gamma + 1)-th step caches x_{gamma-1}, needed when all
drafts are accepted.

gamma is static (one compile per value); ``AdaptiveGamma`` picks it between
calls from the measured acceptance rate.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from rlpt.models import ModelConfig
from rlpt.sampling.fast import (FlatLayout, cached_forward, check_model_cfg, check_prompts,
                                  start_rows)
from rlpt.sampling.logits import SamplingParams, processed_logprobs
from rlpt.sampling.quant import QuantizedState, as_params
from rlpt.sampling.sampler import SampleOutput


def speculative_accept(rng: jax.Array, drafts_BxG: jax.Array, draft_logp_BxGxV: jax.Array,
                       target_logp_BxG1xV: jax.Array,
                       greedy: bool) -> tuple[jax.Array, jax.Array]:
  """Verifies gamma drafts per row against the target.

  Args:
    drafts_BxG: int32 draft tokens, drawn from exp(draft_logp_BxGxV).
    draft_logp_BxGxV: the draft's processed log-probs at each draft step.
    target_logp_BxG1xV: the target's processed log-probs for the gamma draft
      positions and the bonus position.
    greedy: argmax matching instead of rejection sampling.
  Returns:
    (accepted_B: leading drafts accepted, 0..gamma; next_B: the token emitted
    after them: a residual sample on rejection, the bonus token otherwise).
  """
  b, g = drafts_BxG.shape
  if greedy:
    best_BxG1 = jnp.argmax(target_logp_BxG1xV, axis=-1).astype(jnp.int32)
    ok_BxG = drafts_BxG == best_BxG1[:, :g]
    n_B = jnp.sum(jnp.cumprod(ok_BxG, axis=1), axis=1).astype(jnp.int32)
    return n_B, jnp.take_along_axis(best_BxG1, n_B[:, None], axis=1)[:, 0]
  r_accept, r_resid = jax.random.split(rng)
  lp_BxG = jnp.take_along_axis(target_logp_BxG1xV[:, :g], drafts_BxG[..., None], -1)[..., 0]
  lq_BxG = jnp.take_along_axis(draft_logp_BxGxV, drafts_BxG[..., None], -1)[..., 0]
  u_BxG = jax.random.uniform(r_accept, (b, g))
  ok_BxG = jnp.log(u_BxG) < lp_BxG - lq_BxG
  n_B = jnp.sum(jnp.cumprod(ok_BxG, axis=1), axis=1).astype(jnp.int32)
  # q at the bonus position is 0, so its "residual" is p itself: one sampling path.
  q_pad = jnp.concatenate([draft_logp_BxGxV, jnp.full_like(draft_logp_BxGxV[:, :1], -jnp.inf)], 1)
  p_BxV = jnp.exp(jnp.take_along_axis(target_logp_BxG1xV, n_B[:, None, None], axis=1)[:, 0])
  q_BxV = jnp.exp(jnp.take_along_axis(q_pad, n_B[:, None, None], axis=1)[:, 0])
  resid_BxV = jnp.maximum(p_BxV - q_BxV, 0.0)
  # p == q up to rounding leaves no residual mass (and rejection ~never happens): use p.
  resid_BxV = jnp.where(jnp.sum(resid_BxV, -1, keepdims=True) > 0, resid_BxV, p_BxV)
  next_B = jax.random.categorical(r_resid, jnp.log(resid_BxV), axis=-1).astype(jnp.int32)
  return n_B, next_B


class SpecStats(NamedTuple):
  """Counts over one generate call (device scalars).

  proposed: draft tokens verified for rows still running; accepted: of those,
  accepted; target_calls: verification passes (loop iterations).
  """

  proposed: jax.Array
  accepted: jax.Array
  target_calls: jax.Array

  @property
  def acceptance_rate(self) -> float:
    return float(self.accepted) / max(float(self.proposed), 1.0)


class _SpecState(NamedTuple):
  tokens_BxW: jax.Array     # W = max_new_tokens + gamma + 1: room for a full window
  logprobs_BxW: jax.Array
  done_B: jax.Array
  lengths_B: jax.Array
  position_B: jax.Array
  pending_B: jax.Array
  target_cache: object
  draft_cache: object
  rng: jax.Array
  stats: SpecStats


@dataclasses.dataclass(frozen=True)
class SpeculativeSampler:
  """Samples from the target with a draft's proposals; same contract as ``FastSampler``.

  ``generate(target_params, draft_params, prompts_PxL, lengths_P, rng,
  sampling)`` returns (SampleOutput with P * layout.group_size rows, SpecStats).
  Both models use ``layout`` (fp32 / int8 KV, flat or prefix-shared) and
  either may have int8 weights (QuantizedState). The draft must share the
  target's vocabulary.
  """

  target_graphdef: nnx.GraphDef
  target_cfg: ModelConfig
  draft_graphdef: nnx.GraphDef
  draft_cfg: ModelConfig
  max_prompt_len: int
  max_new_tokens: int
  pad_id: int
  stop_ids: tuple[int, ...]
  gamma: int = 4
  layout: object = FlatLayout()

  def __post_init__(self):
    check_model_cfg(self.target_cfg)
    check_model_cfg(self.draft_cfg)
    if self.gamma < 1:
      raise ValueError(f"gamma must be >= 1, got {self.gamma}.")
    if getattr(self.layout, "aligned", False):
      raise ValueError(f"speculative rows accept different numbers of tokens, so they do not "
                       f"step in lockstep: use a layout with aligned=False, got {self.layout}.")
    if self.draft_cfg.vocab_size != self.target_cfg.vocab_size:
      raise ValueError(f"draft vocab_size ({self.draft_cfg.vocab_size}) must equal the "
                       f"target's ({self.target_cfg.vocab_size}).")

  def generate(self, target_params: nnx.State | QuantizedState,
               draft_params: nnx.State | QuantizedState, prompts_PxL, lengths_P,
               rng: jax.Array, sampling: SamplingParams) -> tuple[SampleOutput, SpecStats]:
    check_prompts(prompts_PxL, self.max_prompt_len)
    return _spec_generate(self, target_params, draft_params,
                          jnp.asarray(prompts_PxL, jnp.int32), jnp.asarray(lengths_P, jnp.int32),
                          rng, sampling)


def _draft(sp: SpeculativeSampler, dparams, s: _SpecState, key, sampling: SamplingParams,
           offsets_G1):
  """gamma + 1 draft tokens per row, each from the draft's distribution after the
  one before (the last one only brings the draft's cache up to date): tokens
  [G+1, B], their log-probs [G+1, B, V] and the draft's cache."""
  def draft_step(carry, j):
    tok_B, cache, key = carry
    logits, cache = cached_forward(sp.draft_graphdef, dparams, tok_B[:, None],
                                   (s.position_B + j)[:, None], cache, sp.layout)
    logq_BxV = processed_logprobs(logits[:, 0], sampling)
    key, sub = jax.random.split(key)
    if sampling.greedy:
      nxt_B = jnp.argmax(logq_BxV, axis=-1).astype(jnp.int32)
    else:
      nxt_B = jax.random.categorical(sub, logq_BxV, axis=-1).astype(jnp.int32)
    return (nxt_B, cache, key), (nxt_B, logq_BxV)

  (_, cache, _), (drafts_G1xB, logq_G1xBxV) = jax.lax.scan(
      draft_step, (s.pending_B, s.draft_cache, key), offsets_G1)
  return drafts_G1xB, logq_G1xBxV, cache


def _emitted(sp: SpeculativeSampler, s: _SpecState, drafts_BxG, n_B, next_B, logp_BxG1xV,
             stop_ids, offsets_G1):
  """The window each row emits: drafts[:n], then next, truncated at a stop token
  and at the budget (finished rows emit nothing); (tokens, log-probs, count,
  first stop offset), padding past the count."""
  gamma = sp.gamma
  emit_BxG1 = jnp.where(offsets_G1 < n_B[:, None], jnp.pad(drafts_BxG, ((0, 0), (0, 1))),
                        next_B[:, None])
  is_stop = jnp.isin(emit_BxG1, stop_ids) & (offsets_G1 <= n_B[:, None])
  first_stop_B = jnp.where(jnp.any(is_stop, 1), jnp.argmax(is_stop, 1), gamma + 1)
  count_B = jnp.minimum(jnp.minimum(n_B + 1, first_stop_B + 1), sp.max_new_tokens - s.lengths_B)
  count_B = jnp.where(~s.done_B, count_B, 0)
  keep = offsets_G1 < count_B[:, None]
  emit_logp = jnp.take_along_axis(logp_BxG1xV, emit_BxG1[..., None], -1)[..., 0]
  emit_BxG1 = jnp.where(keep, emit_BxG1, sp.pad_id)
  emit_logp = jnp.where(keep, emit_logp, 0.0)
  return emit_BxG1, emit_logp, count_B, first_stop_B


@functools.partial(jax.jit, static_argnums=(0, 6))
def _spec_generate(sp: SpeculativeSampler, target_params, draft_params, prompts_PxL, lengths_P,
                   rng, sampling: SamplingParams):
  tparams, dparams = as_params(target_params), as_params(draft_params)
  layout, gamma, n_new = sp.layout, sp.gamma, sp.max_new_tokens
  room = n_new + gamma + 1
  tcache = layout.prefill(sp.target_graphdef, sp.target_cfg, tparams, prompts_PxL, lengths_P, room)
  dcache = layout.prefill(sp.draft_graphdef, sp.draft_cfg, dparams, prompts_PxL, lengths_P, room)
  pending_B, position_B = start_rows(prompts_PxL, lengths_P, layout.group_size)
  b = pending_B.shape[0]
  stop_ids = jnp.asarray(sp.stop_ids, jnp.int32)
  offsets_G1 = jnp.arange(gamma + 1, dtype=jnp.int32)

  def body(s: _SpecState):
    rng, r_draft, r_accept = jax.random.split(s.rng, 3)

    drafts_G1xB, logq_G1xBxV, dcache = _draft(sp, dparams, s, r_draft, sampling, offsets_G1)
    drafts_BxG = drafts_G1xB[:gamma].T
    logq_BxGxV = jnp.moveaxis(logq_G1xBxV[:gamma], 0, 1)
    verify_BxG1 = jnp.concatenate([s.pending_B[:, None], drafts_BxG], axis=1)
    logits, tcache = cached_forward(sp.target_graphdef, tparams, verify_BxG1,
                                    s.position_B[:, None] + offsets_G1, s.target_cache,
                                    layout)
    logp_BxG1xV = processed_logprobs(logits, sampling)
    n_B, next_B = speculative_accept(r_accept, drafts_BxG, logq_BxGxV, logp_BxG1xV,
                                     sampling.greedy)
    active = ~s.done_B
    emit_BxG1, emit_logp, count_B, first_stop_B = _emitted(
        sp, s, drafts_BxG, n_B, next_B, logp_BxG1xV, stop_ids, offsets_G1)
    put = jax.vmap(lambda buf, new, i: jax.lax.dynamic_update_slice_in_dim(buf, new, i, 0))
    lengths = s.lengths_B + count_B
    done = s.done_B | (active & (first_stop_B < count_B)) | (lengths >= n_new)
    stats = SpecStats(s.stats.proposed + gamma * jnp.sum(active),
                      s.stats.accepted + jnp.sum(jnp.where(active, n_B, 0)),
                      s.stats.target_calls + 1)
    return _SpecState(put(s.tokens_BxW, emit_BxG1, s.lengths_B),
                      put(s.logprobs_BxW, emit_logp, s.lengths_B), done, lengths,
                      s.position_B + count_B, jnp.where(active, next_B, s.pending_B),
                      tcache, dcache, rng, stats)

  zero = jnp.zeros((), jnp.int32)
  state = _SpecState(jnp.full((b, room), sp.pad_id, jnp.int32), jnp.zeros((b, room), jnp.float32),
                     jnp.zeros((b,), bool), jnp.zeros((b,), jnp.int32), position_B, pending_B,
                     tcache, dcache, rng, SpecStats(zero, zero, zero))
  state = jax.lax.while_loop(lambda s: ~jnp.all(s.done_B), body, state)
  out = SampleOutput(state.tokens_BxW[:, :n_new], state.logprobs_BxW[:, :n_new], state.lengths_B)
  return out, state.stats


def expected_tokens_per_call(acceptance: float, gamma: int) -> float:
  """Tokens emitted per verification with i.i.d. acceptance: (1 - a^(g+1)) / (1 - a)."""
  if acceptance >= 1.0:
    return gamma + 1.0
  return (1.0 - acceptance ** (gamma + 1)) / (1.0 - acceptance)


@dataclasses.dataclass
class AdaptiveGamma:
  """Chooses gamma between generate calls from the measured acceptance rate.

  Maximises expected tokens per unit time, (1 - a^(g+1)) / (1 - a) divided by
  the cost of an iteration, ``1 + draft_cost * (g + 1) + verify_cost * g``,
  in units of one target decode step: ``draft_cost`` is a draft step's cost
  relative to it and ``verify_cost`` the extra cost of each verified token
  (near 0 on accelerators, where verification is memory-bound; larger on
  CPU). ``acceptance`` is an exponential moving average. ``expected_speedup``
  (over plain decoding, same model costs) below 1 means speculation does not
  pay at this acceptance: the caller should switch to the plain sampler.
  """

  gamma: int = 4
  max_gamma: int = 8
  draft_cost: float = 0.1
  verify_cost: float = 0.0
  smoothing: float = 0.5
  acceptance: float | None = None
  expected_speedup: float | None = None

  def update(self, stats: SpecStats | float) -> int:
    rate = stats if isinstance(stats, float) else stats.acceptance_rate
    self.acceptance = rate if self.acceptance is None else (
        self.smoothing * self.acceptance + (1 - self.smoothing) * rate)
    speeds = {g: expected_tokens_per_call(self.acceptance, g)
                 / (1.0 + self.draft_cost * (g + 1) + self.verify_cost * g)
              for g in range(1, self.max_gamma + 1)}
    self.gamma = max(speeds, key=speeds.get)
    self.expected_speedup = speeds[self.gamma]
    return self.gamma
