"""A run's domain sampler from its config sections: a strategy over domain ids, or
over difficulty ladders (``curriculum.adaptive_difficulty``)."""

from __future__ import annotations

from rlpt.curriculum.difficulty import DifficultyLadders
from rlpt.curriculum.samplers import (ADAPTIVE_STRATEGIES, DIFFICULTY_PARAMS, DomainSampler,
                                      make_domain_sampler)
from rlpt.registry import CONFIG_CHECKS


def sampler_from_config(curriculum, domains) -> DomainSampler:
  """The DomainSampler of a run's ``curriculum`` section (rlpt.config.CurriculumConfig)
  over its ``domains`` section (ids, and weights for strategy "fixed"); a fresh
  one each call; with ``curriculum.adaptive_difficulty`` the strategy spreads
  the batch over difficulty ladders (rlpt.curriculum.difficulty). A mistake
  raises ValueError naming the config key."""
  if curriculum.adaptive_difficulty:
    if curriculum.strategy not in ADAPTIVE_STRATEGIES:
      raise ValueError(f"curriculum.adaptive_difficulty=True works with curriculum.strategy in "
                       f"{ADAPTIVE_STRATEGIES} (they spread over ladders, not over domain ids), "
                       f"got '{curriculum.strategy}'.")
    if curriculum.priorities:
      raise ValueError("curriculum.priorities name domain ids; with curriculum."
                       "adaptive_difficulty=True the strategy spreads over ladders: leave "
                       "priorities empty.")
    unknown = sorted(set(curriculum.difficulty) - set(DIFFICULTY_PARAMS))
    if unknown:
      raise ValueError(f"curriculum.difficulty does not take {unknown}; it takes "
                       f"{list(DIFFICULTY_PARAMS)}.")

    def inner(ladders):
      return make_domain_sampler(curriculum.strategy, ladders, min_share=curriculum.min_share,
                                 max_share=curriculum.max_share, **dict(curriculum.params))
    try:
      return DifficultyLadders(inner, domains.ids, **dict(curriculum.difficulty))
    except ValueError as e:
      raise ValueError(f"curriculum: {e}") from None
  params = dict(curriculum.params)
  if curriculum.strategy == "fixed":
    if not domains.weights:
      raise ValueError("curriculum.strategy='fixed' needs domains.weights (one per domain id).")
    params["weights"] = dict(zip(domains.ids, domains.weights))
  elif domains.weights:
    raise ValueError(f"domains.weights is set but curriculum.strategy='{curriculum.strategy}'; "
                     "weights are used by curriculum.strategy='fixed'.")
  try:
    return make_domain_sampler(curriculum.strategy, domains.ids,
                               priorities=dict(curriculum.priorities),
                               min_share=curriculum.min_share, max_share=curriculum.max_share,
                               **params)
  except ValueError as e:
    raise ValueError(f"curriculum: {e}") from None


@CONFIG_CHECKS.register("curriculum")
def check_curriculum(cfg) -> None:
  """A run config's ``curriculum`` over its ``domains``: builds the sampler once
  (strategy, params, weights, priorities), raising ValueError on a mistake."""
  sampler_from_config(cfg.curriculum, cfg.domains)
