"""Multi-domain task sampling: which domain each training task comes from.

``sampler_from_config(cfg.curriculum, cfg.domains)`` builds a run's sampler;
``make_domain_sampler(strategy, domains, **params)`` builds a strategy from
``DOMAIN_SAMPLERS`` (uniform, fixed, temperature, success_band,
learning_progress), with ``curriculum.adaptive_difficulty`` over difficulty
ladders (``DifficultyLadders``); ``domain_metrics`` gives the per-domain metrics
to log and ``signal_sums`` / ``signal_metrics`` where each batch's compute went
and whether it carried signal.
"""

from rlpt.curriculum.difficulty import DifficultyLadders, ladder_of
from rlpt.curriculum.metrics import domain_metrics
from rlpt.curriculum.samplers import (
    DOMAIN_SAMPLERS,
    DomainSampler,
    FixedWeightsSampler,
    LearningProgressSampler,
    SuccessBandSampler,
    TemperatureSampler,
    UniformSampler,
    make_domain_sampler,
    strategy_params,
)
from rlpt.curriculum.from_config import sampler_from_config
from rlpt.curriculum.shares import check_share_bounds, project_capped_simplex
from rlpt.curriculum.signal import domain_family, signal_metrics, signal_sums

__all__ = [
    "DifficultyLadders",
    "ladder_of",
    "domain_family",
    "signal_metrics",
    "signal_sums",
    "domain_metrics",
    "DOMAIN_SAMPLERS",
    "DomainSampler",
    "FixedWeightsSampler",
    "LearningProgressSampler",
    "SuccessBandSampler",
    "TemperatureSampler",
    "UniformSampler",
    "sampler_from_config",
    "make_domain_sampler",
    "strategy_params",
    "check_share_bounds",
    "project_capped_simplex",
]
