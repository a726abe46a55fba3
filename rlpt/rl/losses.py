"""Policy losses, KL estimators, entropy and loss aggregation.

Shapes: B sequences, T completion tokens; ``mask_BxT`` is 1 on tokens the
policy generated (and that are trained), 0 elsewhere. Log-probs are natural
logarithms in fp32.

Aggregations take the GLOBAL counts of the whole batch (``num_tokens``: masked
tokens, ``num_seqs``: sequences with at least one masked token), so a loss
computed per minibatch or per data-parallel shard sums to the full-batch loss.
Use ``loss_counts(mask_BxT)`` on the full batch to get them.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from rlpt.config.losses import LossConfig
from rlpt.registry import AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES, lookup
from rlpt.sampling.logits import SamplingParams, processed_logprobs



# ----------------------------------------------------------------------------
# Policy losses: fn(logp_BxT, old_logp_BxT, adv_BxT, cfg, mask_BxT=None)
#   -> (loss_BxT, aux dict of [B, T] arrays). aux always has "ratio" and "clip_frac".


def _clipped_surrogate(ratio, adv_BxT, low, high):
  unclipped = ratio * adv_BxT
  clipped = jnp.clip(ratio, 1.0 - low, 1.0 + high) * adv_BxT
  return -jnp.minimum(unclipped, clipped), (unclipped > clipped).astype(jnp.float32)


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip(logp_BxT, old_logp_BxT, adv_BxT, cfg: LossConfig, mask_BxT=None):
  """Per-token clipped surrogate loss -min(r A, clip(r, 1-e, 1+e) A)."""
  del mask_BxT
  ratio = jnp.exp(logp_BxT - old_logp_BxT)
  loss, clip_frac = _clipped_surrogate(ratio, adv_BxT, cfg.clip_eps, cfg.clip_eps)
  return loss, {"ratio": ratio, "clip_frac": clip_frac}


@POLICY_LOSSES.register("dual_clip")
def dual_clip(logp_BxT, old_logp_BxT, adv_BxT, cfg: LossConfig, mask_BxT=None):
  """Dual-clip PPO (Ye et al. 2020): PPO clip, and for A < 0 the loss is capped at c|A|.

  With A < 0 and a huge ratio (a token the old policy found unlikely) the PPO
  loss -r A grows without bound; the cap keeps one stale token from dominating.
  """
  del mask_BxT
  ratio = jnp.exp(logp_BxT - old_logp_BxT)
  loss, clip_frac = _clipped_surrogate(ratio, adv_BxT, cfg.clip_eps, cfg.clip_eps)
  cap = -cfg.dual_clip_c * adv_BxT
  neg = adv_BxT < 0
  dual = (neg & (loss > cap)).astype(jnp.float32)
  loss = jnp.where(neg, jnp.minimum(loss, cap), loss)
  return loss, {"ratio": ratio, "clip_frac": clip_frac, "dual_clip_frac": dual}


@POLICY_LOSSES.register("asym_clip")
def asym_clip(logp_BxT, old_logp_BxT, adv_BxT, cfg: LossConfig, mask_BxT=None):
  """DAPO clip-higher: clip(r, 1 - clip_eps, 1 + clip_eps_high).

  A wider upper bound lets low-probability tokens with A > 0 grow, which
  counters entropy collapse.
  """
  del mask_BxT
  ratio = jnp.exp(logp_BxT - old_logp_BxT)
  loss, clip_frac = _clipped_surrogate(ratio, adv_BxT, cfg.clip_eps, cfg.clip_eps_high)
  return loss, {"ratio": ratio, "clip_frac": clip_frac}


@POLICY_LOSSES.register("gspo", per_sequence=True)
def gspo(logp_BxT, old_logp_BxT, adv_BxT, cfg: LossConfig, mask_BxT=None):
  """GSPO (Zheng et al. 2025): one importance ratio per sequence, clipped per sequence.

  s_i = exp(mean over i's masked tokens of (logp - old_logp)); the loss
  -min(s_i A, clip(s_i, 1 - clip_eps, 1 + clip_eps_high) A) is placed on every
  token of sequence i. Autodiff of the length-mean gives the paper's gradient
  s_i A / |y_i| * grad log pi(y_t) on each token. Pair it with a seq-mean
  aggregation so each sequence counts once.
  """
  m = (jnp.ones_like(logp_BxT) if mask_BxT is None else mask_BxT.astype(jnp.float32))
  n_B = jnp.maximum(m.sum(axis=1), 1.0)
  log_s_B = ((logp_BxT - old_logp_BxT) * m).sum(axis=1) / n_B
  ratio = jnp.broadcast_to(jnp.exp(log_s_B)[:, None], logp_BxT.shape)
  loss, clip_frac = _clipped_surrogate(ratio, adv_BxT, cfg.clip_eps, cfg.clip_eps_high)
  return loss, {"ratio": ratio, "clip_frac": clip_frac}


# ----------------------------------------------------------------------------
# KL estimators of KL(pi || pi_ref), per token.


@KL_ESTIMATORS.register("k1")
def kl_k1(logp, ref_logp):
  """log(pi / pi_ref): unbiased, high variance, can be negative."""
  return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def kl_k2(logp, ref_logp):
  """0.5 * log(pi / pi_ref)^2."""
  return 0.5 * (logp - ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def kl_k3(logp, ref_logp):
  """exp(ref - logp) - (ref - logp) - 1: unbiased for KL(pi||ref), always >= 0.

  The log-ratio is clamped to [-10, 10] so a single wild token cannot produce
  an overflow.
  """
  d = jnp.clip(ref_logp - logp, -10.0, 10.0)
  return jnp.exp(d) - d - 1.0


def kl_estimate(name: str, logp, ref_logp):
  return lookup(KL_ESTIMATORS, name)(logp, ref_logp)


# ----------------------------------------------------------------------------
# Aggregations: fn(x_BxT, mask_BxT, num_tokens=None, num_seqs=None, max_len=None) -> scalar.
# Counts left as None are computed from this shard (only right for the whole batch).


class LossCounts(NamedTuple):
  """Global normalisers of the whole batch (float32 scalars)."""

  num_tokens: jax.Array
  num_seqs: jax.Array


def loss_counts(mask_BxT) -> LossCounts:
  """Counts of masked tokens and of sequences with at least one masked token."""
  m = jnp.asarray(mask_BxT, jnp.float32)
  return LossCounts(m.sum(), (m.sum(axis=1) > 0).sum().astype(jnp.float32))


def _seqs(mask_BxT, num_seqs):
  if num_seqs is None:
    num_seqs = (mask_BxT.sum(axis=1) > 0).sum()
  return jnp.maximum(jnp.asarray(num_seqs, jnp.float32), 1.0)


@AGGREGATIONS.register("token-mean")
def token_mean(x_BxT, mask_BxT, num_tokens=None, num_seqs=None, max_len=None):
  """Mean over all trained tokens of the batch: sum(x m) / num_tokens.

  Long answers weigh more (each token counts once). ``num_seqs`` and
  ``max_len`` are unused.
  """
  del num_seqs, max_len
  denom = jnp.sum(mask_BxT) if num_tokens is None else num_tokens
  return jnp.sum(x_BxT * mask_BxT) / jnp.maximum(denom, 1.0)


@AGGREGATIONS.register("seq-mean-token-mean", per_sequence=True)
def seq_mean_token_mean(x_BxT, mask_BxT, num_tokens=None, num_seqs=None, max_len=None):
  """Mean over sequences of each sequence's token mean (the original GRPO).

  Every answer weighs the same whatever its length; empty rows contribute 0.
  """
  del num_tokens, max_len
  n_B = jnp.maximum(mask_BxT.sum(axis=1), 1.0)
  return jnp.sum((x_BxT * mask_BxT).sum(axis=1) / n_B) / _seqs(mask_BxT, num_seqs)


@AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(x_BxT, mask_BxT, num_tokens=None, num_seqs=None, max_len=None):
  """Mean over sequences of each sequence's token sum: sum(x m) / num_seqs."""
  del num_tokens, max_len
  return jnp.sum(x_BxT * mask_BxT) / _seqs(mask_BxT, num_seqs)


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(x_BxT, mask_BxT, num_tokens=None, num_seqs=None, max_len=None):
  """Dr. GRPO: sum(x m) / (num_seqs * max_len) with a FIXED max_len (default T).

  A constant length normaliser removes GRPO's bias toward long wrong answers
  (a per-sequence 1/|y| shrinks their per-token penalty).
  """
  del num_tokens
  length = x_BxT.shape[1] if max_len is None else max_len
  return jnp.sum(x_BxT * mask_BxT) / (_seqs(mask_BxT, num_seqs) * float(length))


def is_per_token(cfg: LossConfig) -> bool:
  """Whether the objective is a sum of per-token terms (given the whole batch's
  counts): neither its policy loss nor its aggregation pools a sequence's
  tokens (registered ``per_sequence``), so a row may hold several sequences
  (rlpt.packing)."""
  return not (POLICY_LOSSES.fact(cfg.policy_loss, "per_sequence", False)
              or AGGREGATIONS.fact(cfg.aggregation, "per_sequence", False))


def aggregate(name: str, x_BxT, mask_BxT, num_tokens=None, num_seqs=None, max_len=None):
  return lookup(AGGREGATIONS, name)(x_BxT, mask_BxT, num_tokens, num_seqs, max_len)


# ----------------------------------------------------------------------------
# Entropy and the full objective.


def entropy_from_logits(logits_BxTxV: jax.Array,
                        sampling: SamplingParams | None = None) -> jax.Array:
  """Entropy in nats [B, T] of the distribution tokens are sampled from.

  ``sampling`` applies the sampler's temperature / top-k / top-p (None: the
  raw softmax). Tokens filtered out have probability 0 and log-prob -inf;
  they are excluded from the sum without producing NaN gradients.
  """
  if sampling is None:
    logp = jax.nn.log_softmax(logits_BxTxV.astype(jnp.float32), axis=-1)
  else:
    logp = processed_logprobs(logits_BxTxV, sampling)
  finite = jnp.isfinite(logp)
  safe = jnp.where(finite, logp, 0.0)
  p = jnp.where(finite, jnp.exp(safe), 0.0)
  return -jnp.sum(p * safe, axis=-1)


def truncated_is_weights(policy_logp_BxT, sampler_logp_BxT, mask_BxT, cap: float):
  """Per-token min(pi_policy / pi_sampler, cap) on sampled tokens (1 elsewhere),
  and metrics of the sampler's mismatch: ``sampler_kl`` (k1 estimate of
  KL(sampler || policy)), ``is_weight_mean`` and ``is_capped_fraction``, each
  over the sampled tokens. The one implementation of truncated importance
  weights: inside the update (`policy_objective`, ``behaviour_tis_cap``) and
  after a scoring pass (the trainer)."""
  ratio = jnp.exp(policy_logp_BxT - sampler_logp_BxT)
  on = mask_BxT > 0
  n = jnp.maximum(on.sum(), 1)
  weight = jnp.where(on, jnp.minimum(ratio, cap), 1.0)
  return weight, {"sampler_kl": jnp.sum(jnp.where(on, sampler_logp_BxT - policy_logp_BxT, 0.0)) / n,
                  "is_weight_mean": jnp.sum(jnp.where(on, weight, 0.0)) / n,
                  "is_capped_fraction": jnp.sum(on & (ratio > cap)) / n}


def policy_objective(logp_BxT, old_logp_BxT, ref_logp_BxT, adv_B, mask_BxT, cfg: LossConfig,
                     num_tokens=None, num_seqs=None, *, kl_coef=None, entropy_BxT=None):
  """Total policy loss (PG + beta * KL - entropy_coef * H) and per-batch metrics.

  adv_B: per-sequence advantages [B] (broadcast over tokens) or per-token [B, T].
  num_tokens, num_seqs: global counts of the whole batch (``loss_counts``).
  kl_coef: a traced scalar replacing ``cfg.kl_beta`` (adaptive KL controller).
  entropy_BxT: ``entropy_from_logits`` of the current policy; required when
    ``cfg.entropy_coef > 0``, reported as a metric when given.
  """
  mask = mask_BxT.astype(jnp.float32)
  adv_BxT = adv_B if adv_B.ndim == 2 else jnp.broadcast_to(adv_B[:, None], logp_BxT.shape)
  is_metrics = {}
  if cfg.behaviour_tis_cap:
    # old_logp is the behaviour policy's; the proximal policy is this one.
    prox = jax.lax.stop_gradient(logp_BxT)
    weight, is_metrics = truncated_is_weights(prox, old_logp_BxT, mask, cfg.behaviour_tis_cap)
    adv_BxT = adv_BxT * weight
    old_logp_BxT = prox
  pg_BxT, aux = lookup(POLICY_LOSSES, cfg.policy_loss)(logp_BxT, old_logp_BxT, adv_BxT, cfg, mask)
  kl_BxT = kl_estimate(cfg.kl_estimator, logp_BxT, jax.lax.stop_gradient(ref_logp_BxT))

  def agg(x):
    return aggregate(cfg.aggregation, x, mask, num_tokens, num_seqs, cfg.norm_len)

  pg = agg(pg_BxT)
  kl = agg(kl_BxT)
  beta = cfg.kl_beta if kl_coef is None else kl_coef
  loss = pg + beta * kl
  metrics = {"pg_loss": pg, "kl": kl, "ratio_mean": agg(aux["ratio"])}
  for key, value in aux.items():
    if key != "ratio":
      metrics[key] = agg(value)
  if cfg.entropy_coef > 0 and entropy_BxT is None:
    raise ValueError(f"entropy_coef={cfg.entropy_coef} > 0 needs entropy_BxT "
                     "(entropy_from_logits of the policy's logits).")
  if entropy_BxT is not None:
    entropy = agg(entropy_BxT)
    loss = loss - cfg.entropy_coef * entropy
    metrics["entropy"] = entropy
  metrics["loss"] = loss
  metrics.update(is_metrics)
  return loss, metrics
