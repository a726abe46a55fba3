"""The objectives' hyperparameters as the jitted steps read them (static):
`LossConfig` (the policy's) and `ValueLossConfig` (the critic's), built from a
run's ``rl`` and ``value`` sections (`TrainConfig.loss_config`). Names are
checked against `rlpt.registry`."""

from __future__ import annotations

import dataclasses

from rlpt.registry import AGGREGATIONS, KL_ESTIMATORS, POLICY_LOSSES, lookup


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Hyperparameters of the policy objective (static in the jitted step).

  clip_eps: PPO trust region; the lower bound 1 - clip_eps for every clipped loss.
  clip_eps_high: upper bound 1 + clip_eps_high, read by ``asym_clip`` (DAPO
    clip-higher, 0.28) and ``gspo`` (the GSPO paper uses clip_eps=3e-4,
    clip_eps_high=4e-4 because sequence ratios stay close to 1).
  dual_clip_c: for A < 0, ``dual_clip`` caps the loss at c * |A| (c > 1).
  kl_beta: KL-in-the-loss coefficient (0 disables it, e.g. with KL in the reward).
  entropy_coef: entropy bonus weight; > 0 requires ``entropy_BxT``.
  norm_len: the fixed length of ``seq-mean-token-sum-norm``; None uses T.
  behaviour_tis_cap: 0 (default): ``old_logp`` is the proximal policy of the
    ratio. > 0: ``old_logp`` is the behaviour policy that sampled the tokens
    (a stale or int8 sampler) and the proximal policy is the current one:
    the ratio is taken against stop_gradient(logp) and each token's advantage
    is weighted by min(pi / pi_behaviour, cap) (truncated importance
    sampling). With one update per batch this equals recomputing the
    behaviour log-probs with the policy first, without that forward pass.
  """

  policy_loss: str = "ppo_clip"
  clip_eps: float = 0.2
  clip_eps_high: float = 0.28
  dual_clip_c: float = 3.0
  kl_beta: float = 0.04
  kl_estimator: str = "k3"
  aggregation: str = "token-mean"
  entropy_coef: float = 0.0
  norm_len: int | None = None
  behaviour_tis_cap: float = 0.0

  def __post_init__(self):
    lookup(POLICY_LOSSES, self.policy_loss)
    lookup(KL_ESTIMATORS, self.kl_estimator)
    lookup(AGGREGATIONS, self.aggregation)
    if not 0.0 < self.clip_eps < 1.0:
      raise ValueError(f"clip_eps must be in (0, 1), got {self.clip_eps}.")
    if not self.clip_eps_high > 0.0:
      raise ValueError(f"clip_eps_high must be > 0, got {self.clip_eps_high}.")
    if not self.dual_clip_c > 1.0:
      raise ValueError(f"dual_clip_c must be > 1 (the bound c*|A| lies beyond the PPO clip), "
                       f"got {self.dual_clip_c}.")
    if self.kl_beta < 0:
      raise ValueError(f"kl_beta must be >= 0, got {self.kl_beta}.")
    if self.entropy_coef < 0:
      raise ValueError(f"entropy_coef must be >= 0, got {self.entropy_coef}.")
    if self.norm_len is not None and self.norm_len < 1:
      raise ValueError(f"norm_len must be >= 1 (or None for T), got {self.norm_len}.")
    if self.behaviour_tis_cap and self.behaviour_tis_cap < 1.0:
      raise ValueError(f"behaviour_tis_cap must be 0 (off) or >= 1, got {self.behaviour_tis_cap}.")


@dataclasses.dataclass(frozen=True)
class ValueLossConfig:
  """Hyperparameters of the value objective (static in the jitted step).

  value_clip: eps_v of the clipped value loss; None disables clipping. Unlike
    the policy's ratio clip it is in reward units, so it depends on the reward
    scale.
  aggregation: one of ``AGGREGATIONS``, normalised by global counts.
  norm_len: fixed length for ``seq-mean-token-sum-norm`` (None: T).
  """

  value_clip: float | None = 0.2
  aggregation: str = "token-mean"
  norm_len: int | None = None

  def __post_init__(self):
    lookup(AGGREGATIONS, self.aggregation)
    if self.value_clip is not None and not self.value_clip > 0:
      raise ValueError(f"value_clip must be > 0 (or None to disable), got {self.value_clip}.")
    if self.norm_len is not None and self.norm_len < 1:
      raise ValueError(f"norm_len must be >= 1 (or None for T), got {self.norm_len}.")
