"""RL objectives as small registered pure functions.

A new algorithm is a new function registered by name, not a new branch in the
train step: ``ADVANTAGE_ESTIMATORS``, ``POLICY_LOSSES``, ``KL_ESTIMATORS`` and
``AGGREGATIONS`` map names to functions; ``lookup`` gives a clear error for an
unknown name.
"""

from rlpt.rl.advantages import ADVANTAGE_ESTIMATORS, grpo_advantages
from rlpt.rl.losses import (
    AGGREGATIONS,
    KL_ESTIMATORS,
    POLICY_LOSSES,
    LossConfig,
    aggregate,
    kl_estimate,
    policy_objective,
)
from rlpt.rl.registry import lookup

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "grpo_advantages",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "LossConfig",
    "aggregate",
    "kl_estimate",
    "policy_objective",
    "lookup",
]
