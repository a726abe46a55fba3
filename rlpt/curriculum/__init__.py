"""Multi-domain task sampling: which domain each training task comes from.

``sampler_from_config(cfg.curriculum, cfg.domains)`` builds a run's sampler;
``make_domain_sampler(strategy, domains, **params)`` builds a strategy from
``DOMAIN_SAMPLERS`` (uniform, fixed, temperature, success_band,
learning_progress); ``domain_metrics`` gives the per-domain metrics to log.
"""

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
    sampler_from_config,
    strategy_params,
)
from rlpt.curriculum.shares import check_share_bounds, project_capped_simplex

__all__ = [
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
