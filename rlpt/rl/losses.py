"""Policy losses, KL estimators and loss aggregation.

Shapes: B sequences, T completion tokens; ``mask_BxT`` is 1 on tokens the
policy generated (and that are trained), 0 elsewhere. Log-probs are natural
logarithms in fp32.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from rlpt.rl.registry import Registry, lookup

POLICY_LOSSES = Registry("policy loss")
KL_ESTIMATORS = Registry("KL estimator")
AGGREGATIONS = Registry("loss aggregation")


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Hyperparameters of the policy objective (static in the jitted step)."""

  policy_loss: str = "ppo_clip"
  clip_eps: float = 0.2
  kl_beta: float = 0.04
  kl_estimator: str = "k3"
  aggregation: str = "token-mean"

  def __post_init__(self):
    lookup(POLICY_LOSSES, self.policy_loss)
    lookup(KL_ESTIMATORS, self.kl_estimator)
    lookup(AGGREGATIONS, self.aggregation)
    if not 0.0 < self.clip_eps < 1.0:
      raise ValueError(f"clip_eps must be in (0, 1), got {self.clip_eps}.")
    if self.kl_beta < 0:
      raise ValueError(f"kl_beta must be >= 0, got {self.kl_beta}.")


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip(logp_BxT, old_logp_BxT, adv_BxT, cfg: LossConfig):
  """Per-token clipped surrogate loss -min(r A, clip(r, 1-e, 1+e) A)."""
  ratio = jnp.exp(logp_BxT - old_logp_BxT)
  unclipped = ratio * adv_BxT
  clipped = jnp.clip(ratio, 1.0 - cfg.clip_eps, 1.0 + cfg.clip_eps) * adv_BxT
  loss = -jnp.minimum(unclipped, clipped)
  clip_frac = (unclipped > clipped).astype(jnp.float32)
  return loss, {"ratio": ratio, "clip_frac": clip_frac}


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


@AGGREGATIONS.register("token-mean")
def token_mean(x_BxT, mask_BxT, num_tokens=None):
  """Mean over all trained tokens of the batch.

  ``num_tokens`` is the global count; passing it makes the result independent
  of how the batch is split into minibatches or data-parallel shards.
  """
  denom = jnp.sum(mask_BxT) if num_tokens is None else num_tokens
  return jnp.sum(x_BxT * mask_BxT) / jnp.maximum(denom, 1.0)


def aggregate(name: str, x_BxT, mask_BxT, num_tokens=None):
  return lookup(AGGREGATIONS, name)(x_BxT, mask_BxT, num_tokens)


def policy_objective(logp_BxT, old_logp_BxT, ref_logp_BxT, adv_B, mask_BxT, cfg: LossConfig,
                     num_tokens=None):
  """Total policy loss (PG + beta * KL) and per-batch metrics.

  ``adv_B`` is a per-sequence advantage broadcast over its tokens.
  """
  mask = mask_BxT.astype(jnp.float32)
  adv_BxT = jnp.broadcast_to(adv_B[:, None], logp_BxT.shape)
  pg_BxT, aux = POLICY_LOSSES[cfg.policy_loss](logp_BxT, old_logp_BxT, adv_BxT, cfg)
  kl_BxT = kl_estimate(cfg.kl_estimator, logp_BxT, jax.lax.stop_gradient(ref_logp_BxT))
  pg = aggregate(cfg.aggregation, pg_BxT, mask, num_tokens)
  kl = aggregate(cfg.aggregation, kl_BxT, mask, num_tokens)
  loss = pg + cfg.kl_beta * kl
  metrics = {
      "loss": loss,
      "pg_loss": pg,
      "kl": kl,
      "clip_frac": aggregate(cfg.aggregation, aux["clip_frac"], mask, num_tokens),
      "ratio_mean": aggregate(cfg.aggregation, aux["ratio"], mask, num_tokens),
  }
  return loss, metrics
