"""Which domain each training task comes from: static and adaptive strategies.

Every strategy produces a preference weight per domain; the sampling shares
are those weights times the domain priorities, projected onto the capped
simplex {min_share <= share <= max_share, sum = 1} (``project_capped_simplex``)
so no domain starves and none takes over the batch.

Interface (all strategies):
  sample(n, rng) -> list of n domain ids, drawn i.i.d. from the shares.
  update({domain: [per-sample success in [0, 1], ...]}) after grading.
  weights() -> {domain: share}.
  state_dict() / load_state_dict(): JSON-serialisable, part of the checkpoint.

``make_domain_sampler(strategy, domains, **params)`` builds one by name from
``DOMAIN_SAMPLERS``.
"""

from __future__ import annotations

import abc
import inspect
import math
from collections.abc import Mapping, Sequence

import numpy as np

from rlpt.curriculum.shares import check_share_bounds, project_capped_simplex
from rlpt.registry import DOMAIN_SAMPLERS, lookup



def _check_cover(what: str, mapping: Mapping[str, float], domains: Sequence[str],
                 partial: bool = False) -> None:
  """Names the domains a per-domain mapping is missing or has in excess."""
  extra = sorted(set(mapping) - set(domains))
  missing = [] if partial else sorted(set(domains) - set(mapping))
  if extra or missing:
    parts = ([f"missing {missing}"] if missing else []) + ([f"extra {extra}"] if extra else [])
    raise ValueError(f"{what} must {'only name' if partial else 'cover exactly'} the configured "
                     f"domains {list(domains)}: {'; '.join(parts)}.")


def checked_results(results: Mapping[str, Sequence[float]],
                    domains: Sequence[str]) -> dict[str, np.ndarray]:
  """``update``'s results as float arrays, in domain order; unknown domains and
  non-finite values raise ValueError naming them."""
  unknown = sorted(set(results) - set(domains))
  if unknown:
    raise ValueError(f"update got results for unknown domains {unknown}; "
                     f"configured: {list(domains)}.")
  out = {}
  for d in sorted(results):
    v = np.asarray(results[d], np.float64).reshape(-1)
    if not np.isfinite(v).all():
      raise ValueError(f"results for domain '{d}' must be finite, got {v.tolist()}.")
    out[d] = v
  return out


class DomainSampler(abc.ABC):
  """Base class: shares = capped-simplex projection of (strategy weight x priority).

  domains: the configured domain ids (unique).
  priorities: optional {domain: factor >= 0} scaling a domain's weight
    (missing domains have priority 1; 0 leaves a domain at its floor).
  min_share, max_share: per-domain floor and cap of the sampling share.
  """

  name = "base"

  def __init__(self, domains: Sequence[str], *, priorities: Mapping[str, float] | None = None,
               min_share: float = 0.0, max_share: float = 1.0):
    self.domains = tuple(domains)
    if not self.domains:
      raise ValueError("a domain sampler needs at least one domain, got none.")
    dup = sorted({d for d in self.domains if self.domains.count(d) > 1})
    if dup:
      raise ValueError(f"domains must be unique, repeated: {dup}.")
    check_share_bounds(len(self.domains), min_share, max_share)
    self.min_share, self.max_share = float(min_share), float(max_share)
    priorities = dict(priorities or {})
    _check_cover("priorities", priorities, self.domains, partial=True)
    bad = {d: p for d, p in priorities.items() if not (math.isfinite(p) and p >= 0)}
    if bad:
      raise ValueError(f"priorities must be finite and >= 0, got {bad}.")
    self.priorities = np.array([float(priorities.get(d, 1.0)) for d in self.domains])
    if not self.priorities.any():
      raise ValueError(f"priorities are all 0 ({priorities}): no domain to prefer.")
    self._index = {d: i for i, d in enumerate(self.domains)}
    self._shares = np.full(len(self.domains), 1.0 / len(self.domains))

  @abc.abstractmethod
  def preference(self) -> np.ndarray:
    """Unnormalised weight per domain, [num_domains] >= 0 (the strategy)."""

  def _observe(self, i: int, values: np.ndarray) -> None:
    """Records one domain's new per-sample results; static strategies ignore them."""

  def _refresh(self) -> None:
    self._shares = project_capped_simplex(self.preference() * self.priorities, self.min_share,
                                          self.max_share)

  def weights(self) -> dict[str, float]:
    return {d: float(s) for d, s in zip(self.domains, self._shares)}

  def sample(self, n: int, rng: np.random.Generator) -> list[str]:
    """n domain ids drawn i.i.d. from the current shares."""
    if n < 0:
      raise ValueError(f"n must be >= 0, got {n}.")
    p = self._shares / self._shares.sum()
    return [self.domains[i] for i in rng.choice(len(self.domains), size=n, p=p)]

  def update(self, results: Mapping[str, Sequence[float]]) -> None:
    """Feeds per-sample successes (in [0, 1]) of each domain seen in the last batch."""
    for d, v in checked_results(results, self.domains).items():
      if len(v):
        self._observe(self._index[d], v)
    self._refresh()

  def metrics(self) -> dict[str, float]:
    """The strategy's own figures to log each step (none by default)."""
    return {}

  def _stats(self) -> dict:
    return {}

  def _load_stats(self, stats: dict) -> None:
    del stats

  def state_dict(self) -> dict:
    return {"strategy": self.name, "domains": list(self.domains), "stats": self._stats()}

  def load_state_dict(self, state: Mapping) -> None:
    if state["strategy"] != self.name:
      raise ValueError(f"checkpoint is of strategy '{state['strategy']}', this sampler is "
                       f"'{self.name}'.")
    if list(state["domains"]) != list(self.domains):
      missing = sorted(set(self.domains) - set(state["domains"]))
      extra = sorted(set(state["domains"]) - set(self.domains))
      raise ValueError(f"checkpoint domains {list(state['domains'])} differ from the configured "
                       f"{list(self.domains)}: not in the checkpoint {missing}; not configured "
                       f"{extra} (the order must match too).")
    self._load_stats(state["stats"])
    self._refresh()


@DOMAIN_SAMPLERS.register("uniform")
class UniformSampler(DomainSampler):
  """Every domain equally often (before priorities and bounds)."""

  name = "uniform"

  def __init__(self, domains, **common):
    super().__init__(domains, **common)
    self._refresh()

  def preference(self):
    return np.ones(len(self.domains))


@DOMAIN_SAMPLERS.register("fixed")
class FixedWeightsSampler(DomainSampler):
  """Shares proportional to weights from the config, one per configured domain."""

  name = "fixed"

  def __init__(self, domains, *, weights: Mapping[str, float], **common):
    super().__init__(domains, **common)
    _check_cover("weights", weights, self.domains)
    bad = {d: w for d, w in weights.items() if not (math.isfinite(w) and w >= 0)}
    if bad:
      raise ValueError(f"weights must be finite and >= 0, got {bad}.")
    self._weights = np.array([float(weights[d]) for d in self.domains])
    if not self._weights.any():
      raise ValueError(f"weights are all 0 ({dict(weights)}): no domain to sample.")
    self._refresh()

  def preference(self):
    return self._weights


@DOMAIN_SAMPLERS.register("temperature")
class TemperatureSampler(DomainSampler):
  """p_i proportional to n_i^(1/T) over dataset sizes n_i.

  T = 1 samples in proportion to size (examples uniformly); larger T flattens
  toward uniform over domains, so small datasets are not drowned out.
  """

  name = "temperature"

  def __init__(self, domains, *, sizes: Mapping[str, float], temperature: float = 1.0,
               **common):
    super().__init__(domains, **common)
    _check_cover("sizes", sizes, self.domains)
    bad = {d: n for d, n in sizes.items() if not (math.isfinite(n) and n > 0)}
    if bad:
      raise ValueError(f"dataset sizes must be finite and > 0, got {bad}.")
    if not (math.isfinite(temperature) and temperature > 0):
      raise ValueError(f"temperature must be > 0, got {temperature}.")
    self.temperature = float(temperature)
    log_n = np.log(np.array([float(sizes[d]) for d in self.domains]))
    # In log space: sizes like 1e9 ** (1/0.1) would overflow.
    z = log_n / self.temperature
    self._weights = np.exp(z - z.max())
    self._refresh()

  def preference(self):
    return self._weights


class _EMASampler(DomainSampler):
  """Shared bookkeeping of the adaptive strategies: per-sample EMAs of success.

  EMAs start at 0 and are bias-corrected (divided by 1 - (1-a)^count, as in
  Adam), so a domain's estimate is the mean of its first samples rather than
  being dragged toward 0. A domain with fewer than ``min_samples`` results is
  still exploring and gets the largest weight of the explored ones.
  """

  alphas: tuple[str, ...] = ()

  def __init__(self, domains, *, min_samples: int = 8, **common):
    super().__init__(domains, **common)
    if min_samples < 1:
      raise ValueError(f"min_samples must be >= 1, got {min_samples}.")
    self.min_samples = int(min_samples)
    n = len(self.domains)
    self._count = np.zeros(n, np.int64)
    self._ema = {a: np.zeros(n) for a in self.alphas}

  def _check_alpha(self, name: str, value: float) -> float:
    if not 0.0 < value <= 1.0:
      raise ValueError(f"{name} must be in (0, 1], got {value}.")
    return float(value)

  def _observe(self, i, values):
    for key, ema in self._ema.items():
      a = getattr(self, key)
      for x in values:
        ema[i] += a * (x - ema[i])
    self._count[i] += len(values)

  def estimate(self, key: str) -> np.ndarray:
    """Bias-corrected EMA per domain (0 where nothing was seen)."""
    a = getattr(self, key)
    denom = 1.0 - (1.0 - a) ** self._count
    return np.where(self._count > 0, self._ema[key] / np.where(denom > 0, denom, 1.0), 0.0)

  def _explore(self, scores: np.ndarray) -> np.ndarray:
    young = self._count < self.min_samples
    best = scores[~young].max() if (~young).any() and scores[~young].max() > 0 else 1.0
    return np.where(young, best, scores)

  def _stats(self):
    return {"count": self._count.tolist(), **{k: v.tolist() for k, v in self._ema.items()}}

  def _load_stats(self, stats):
    self._count = np.asarray(stats["count"], np.int64)
    for k in self._ema:
      self._ema[k] = np.asarray(stats[k], np.float64)


@DOMAIN_SAMPLERS.register("success_band")
class SuccessBandSampler(_EMASampler):
  """Weight 1 on domains whose success EMA lies in [low, high], ``outside_weight`` elsewhere.

  Below ``low`` the policy is hopeless (every group scores 0: no gradient),
  above ``high`` the domain is solved (every group scores 1); in between the
  groups have reward variance and the batch teaches something.
  """

  name = "success_band"
  alphas = ("alpha",)

  def __init__(self, domains, *, low: float = 0.1, high: float = 0.9, outside_weight: float = 0.1,
               alpha: float = 0.1, min_samples: int = 8, **common):
    super().__init__(domains, min_samples=min_samples, **common)
    if not 0.0 <= low < high <= 1.0:
      raise ValueError(f"need 0 <= low < high <= 1, got low={low}, high={high}.")
    if not 0.0 <= outside_weight <= 1.0:
      raise ValueError(f"outside_weight must be in [0, 1], got {outside_weight}.")
    self.low, self.high, self.outside_weight = float(low), float(high), float(outside_weight)
    self.alpha = self._check_alpha("alpha", alpha)
    self._refresh()

  def preference(self):
    s = self.estimate("alpha")
    inside = (s >= self.low) & (s <= self.high)
    return self._explore(np.where(inside, 1.0, self.outside_weight))


@DOMAIN_SAMPLERS.register("learning_progress")
class LearningProgressSampler(_EMASampler):
  """Weight = learning progress |fast EMA - slow EMA| of success (+ ``floor``).

  The gap between a fast and a slow average is large while success is moving
  (either way: forgetting also deserves practice) and 0 on solved and
  hopeless domains, whose success is constant. Sampling noise also opens a
  small gap on domains near 50% success; ``alpha_slow`` sets how much.
  """

  name = "learning_progress"
  alphas = ("alpha_fast", "alpha_slow")

  def __init__(self, domains, *, alpha_fast: float = 0.1, alpha_slow: float = 0.02,
               floor: float = 0.0, min_samples: int = 8, **common):
    super().__init__(domains, min_samples=min_samples, **common)
    self.alpha_fast = self._check_alpha("alpha_fast", alpha_fast)
    self.alpha_slow = self._check_alpha("alpha_slow", alpha_slow)
    if not self.alpha_slow < self.alpha_fast:
      raise ValueError(f"alpha_slow={alpha_slow} must be < alpha_fast={alpha_fast}.")
    if floor < 0:
      raise ValueError(f"floor must be >= 0, got {floor}.")
    self.floor = float(floor)
    self._refresh()

  def learning_progress(self) -> np.ndarray:
    return np.abs(self.estimate("alpha_fast") - self.estimate("alpha_slow"))

  def preference(self):
    return self._explore(self.learning_progress() + self.floor)


_COMMON = ("priorities", "min_share", "max_share")
# Strategies that take no per-domain-id parameters, so they can spread over
# difficulty ladders; and the ladders' own parameters (DifficultyLadders).
ADAPTIVE_STRATEGIES = ("uniform", "success_band", "learning_progress")
DIFFICULTY_PARAMS = ("up", "down", "alpha", "min_samples")


def strategy_params(strategy: str) -> list[str]:
  """The keyword parameters a strategy accepts (its own and the common ones)."""
  cls = lookup(DOMAIN_SAMPLERS, strategy)
  own = [p for p in inspect.signature(cls.__init__).parameters
         if p not in ("self", "domains", "common")]
  return own + [p for p in _COMMON if p not in own]


def make_domain_sampler(strategy: str, domains: Sequence[str], **params) -> DomainSampler:
  """Builds the named strategy; an unknown name or parameter raises ValueError."""
  known = strategy_params(strategy)
  unknown = sorted(set(params) - set(known))
  if unknown:
    raise ValueError(f"domain sampling strategy '{strategy}' does not take {unknown}; "
                     f"it takes {known}.")
  sig = inspect.signature(DOMAIN_SAMPLERS[strategy].__init__).parameters
  missing = [p for p in known if p in sig and sig[p].default is inspect.Parameter.empty
             and p not in params]
  if missing:
    raise ValueError(f"domain sampling strategy '{strategy}' needs {missing}.")
  return DOMAIN_SAMPLERS[strategy](domains, **params)
