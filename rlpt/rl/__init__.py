"""RL objectives as small registered pure functions.

A new algorithm is a new function registered by name, not a new branch in the
train step: ``ADVANTAGE_ESTIMATORS``, ``POLICY_LOSSES``, ``KL_ESTIMATORS``,
``AGGREGATIONS`` and ``KL_CONTROLLERS`` map names to functions; ``lookup``
gives a clear error for an unknown name.

Modules: ``advantages`` (GRPO, Dr.GRPO, RLOO, REINFORCE++, GAE), ``losses``
(policy losses, KL estimators, aggregations, entropy, ``policy_objective``),
``value`` (the critic's clipped loss), ``kl`` (KL in the reward, fixed and
adaptive coefficients), ``filters`` (DAPO dynamic sampling and overlong
handling, host-side NumPy).
"""

from rlpt.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvantageInputs,
    Advantages,
    compute_advantages,
    dr_grpo_advantages,
    gae_advantages,
    gae_advantages_and_returns,
    gae_BxT,
    grpo_advantages,
    masked_whiten,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
    terminal_rewards_BxT,
)
from rlpt.rl.filters import (
    FilledBatch,
    fill_groups,
    groups_with_signal,
    overlong_filter_BxT,
    soft_overlong_penalty_B,
    truncated_B,
)
from rlpt.rl.kl import (
    KL_CONTROLLERS,
    AdaptiveKLController,
    FixedKLController,
    kl_penalized_rewards_B,
    kl_reward_penalty_BxT,
    make_kl_controller,
    sequence_kl_B,
)
from rlpt.rl.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    LossConfig,
    LossCounts,
    aggregate,
    entropy_from_logits,
    is_per_token,
    kl_estimate,
    loss_counts,
    policy_objective,
    truncated_is_weights,
)
from rlpt.registry import is_group_baseline, lookup, needs_value_model
from rlpt.rl.value import ValueLossConfig, value_objective

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageInputs",
    "Advantages",
    "compute_advantages",
    "dr_grpo_advantages",
    "gae_advantages",
    "gae_advantages_and_returns",
    "gae_BxT",
    "grpo_advantages",
    "masked_whiten",
    "is_group_baseline",
    "needs_value_model",
    "reinforce_pp_advantages",
    "reinforce_pp_baseline_advantages",
    "rloo_advantages",
    "terminal_rewards_BxT",
    "FilledBatch",
    "fill_groups",
    "groups_with_signal",
    "overlong_filter_BxT",
    "soft_overlong_penalty_B",
    "truncated_B",
    "truncated_is_weights",
    "KL_CONTROLLERS",
    "AdaptiveKLController",
    "FixedKLController",
    "kl_penalized_rewards_B",
    "kl_reward_penalty_BxT",
    "make_kl_controller",
    "sequence_kl_B",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "LossConfig",
    "LossCounts",
    "aggregate",
    "entropy_from_logits",
    "is_per_token",
    "kl_estimate",
    "loss_counts",
    "policy_objective",
    "lookup",
    "ValueLossConfig",
    "value_objective",
]
