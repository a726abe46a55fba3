"""The sampling distribution, defined once for the sampler and the trainer.

The sampler draws from ``processed_logprobs(logits, params)`` and the trainer
scores tokens with ``token_logprobs`` over the same processing, so the
behaviour policy's log-probs equal the trainer's recomputation (including with
temperature != 1 and top-k / top-p), which PPO-style ratios rely on.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

_NEG_INF = -jnp.inf


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """How tokens are drawn. Hashable: it is a static argument of jitted code.

  temperature 0 means greedy decoding (log-probs are then those of the raw
  logits). top_k 0 and top_p 1.0 disable those filters.
  """

  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0

  def __post_init__(self):
    if self.temperature < 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}.")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}.")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")

  @property
  def greedy(self) -> bool:
    return self.temperature == 0.0


# Tokens ranked by partial selection before top-p falls back to a full sort.
TOP_P_CANDIDATES = 64


def _ranked_keep(sorted_logits, params: SamplingParams, lse_all=None):
  """Which of the descending ``sorted_logits`` [..., C] top-k / top-p keep.

  top-p keeps the smallest prefix whose probability reaches top_p (the
  crossing token included), the probabilities normalised over the top-k (or,
  with ``lse_all``, the log-sum-exp of every logit, over the whole vocabulary).
  Also returns whether the prefix ends inside these C tokens.
  """
  c = sorted_logits.shape[-1]
  keep = jnp.ones(sorted_logits.shape, bool)
  if params.top_k:
    keep &= jnp.arange(c) < params.top_k
  if params.top_p >= 1.0:
    return keep, jnp.ones(sorted_logits.shape[:-1], bool)
  masked = jnp.where(keep, sorted_logits, _NEG_INF)
  lse = jax.nn.logsumexp(masked, axis=-1, keepdims=True) if lse_all is None else lse_all
  probs = jnp.exp(masked - lse)
  mass_before = jnp.cumsum(probs, axis=-1) - probs
  return keep & (mass_before < params.top_p), mass_before[..., -1] + probs[..., -1] >= params.top_p


def _filter_mask(scaled_V: jax.Array, params: SamplingParams,
                 keep_id: jax.Array | None) -> jax.Array | None:
  """Boolean [..., V] mask of tokens allowed by top-k / top-p, or None.

  The ranked tokens come from partial selection (``lax.top_k``), not a sort of
  the vocabulary: top-k needs its k, top-p the tokens up to its crossing,
  which for a trained model at usual settings is a few dozen. top-p ranks
  ``TOP_P_CANDIDATES`` (or the top-k, if smaller) and sorts the whole
  vocabulary only when some row's nucleus does not end inside them. Either way
  the kept set is the one a full stable sort gives: a token is kept iff its
  logit is at least the last kept one's (ties with it kept, as a stable sort
  keeps the lower ids of a tie that the cut passes through, and exact ties of
  real logits are measure zero).
  """
  if params.top_k == 0 and params.top_p >= 1.0:
    return None
  v = scaled_V.shape[-1]
  # top-k ranks its k (top-p then normalises over them); top-p alone ranks a
  # few candidates and normalises over the whole vocabulary.
  cand = min(v, params.top_k) if params.top_k else min(v, TOP_P_CANDIDATES)
  lse_all = None if params.top_k else jax.nn.logsumexp(scaled_V, axis=-1, keepdims=True)

  def threshold(top):  # the smallest kept logit of each row, [..., 1]
    keep, covered = _ranked_keep(top, params, lse_all)
    return jnp.min(jnp.where(keep, top, jnp.inf), axis=-1, keepdims=True), covered

  top = jax.lax.top_k(scaled_V, cand)[0]
  cut, covered = threshold(top)
  if cand < v and params.top_p < 1.0:
    # Some nucleus is longer than the candidates: rank every token (rare).
    cut = jax.lax.cond(jnp.all(covered), lambda: cut,
                       lambda: threshold(jax.lax.top_k(scaled_V, v)[0])[0])
  keep = scaled_V >= cut
  if keep_id is not None:
    # The token that was actually sampled is in the support by construction; a
    # last-ulp difference between two forward passes must not push it out.
    keep |= jax.nn.one_hot(keep_id, v, dtype=bool)
  return jax.lax.stop_gradient(keep)


def processed_logprobs(logits_V: jax.Array, params: SamplingParams,
                       keep_id: jax.Array | None = None) -> jax.Array:
  """Log-probabilities of the sampling distribution, [..., V] in fp32."""
  logits_V = logits_V.astype(jnp.float32)
  if params.greedy:
    return jax.nn.log_softmax(logits_V, axis=-1)
  scaled = logits_V / params.temperature
  keep = _filter_mask(scaled, params, keep_id)
  if keep is not None:
    scaled = jnp.where(keep, scaled, _NEG_INF)
  return jax.nn.log_softmax(scaled, axis=-1)


def token_logprobs(logits_BxTxV: jax.Array, tokens_BxT: jax.Array,
                   params: SamplingParams) -> jax.Array:
  """Log-prob of each given token under the sampling distribution, [B, T]."""
  logp = processed_logprobs(logits_BxTxV, params, keep_id=tokens_BxT)
  return jnp.take_along_axis(logp, tokens_BxT[..., None], axis=-1)[..., 0]


def sample_token(rng: jax.Array, logits_BxV: jax.Array,
                 params: SamplingParams) -> tuple[jax.Array, jax.Array]:
  """Draws one token per row. Returns (tokens [B] int32, their log-probs [B])."""
  logp_BxV = processed_logprobs(logits_BxV, params)
  if params.greedy:
    tok = jnp.argmax(logp_BxV, axis=-1)
  else:
    tok = jax.random.categorical(rng, logp_BxV, axis=-1)
  tok = tok.astype(jnp.int32)
  return tok, jnp.take_along_axis(logp_BxV, tok[:, None], axis=-1)[:, 0]
