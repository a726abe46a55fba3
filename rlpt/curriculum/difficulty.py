"""Adaptive difficulty: each domain family's easy / medium / hard variants form
a ladder, and a ladder's draws move up a level when the policy masters its
current one and down when success there collapses.

    sampler = DifficultyLadders(inner, domains, up=0.8, down=0.05, min_samples=32)

``inner`` (any strategy of rlpt.curriculum.samplers) spreads the batch over
the *ladders*: domain ids that differ only in their difficulty word
("rlpt/strings-reverse-easy-v0", "...-medium-v0", "...-hard-v0"; reasoning-gym
levels are such words too, bounded cuts keep them: "...-easy-p126-v0").
Each ladder's draws go to its current level, which starts at its easiest.
After ``min_samples`` results at a level, a success EMA (bias-corrected, rate
``alpha``) at or above ``up`` moves the ladder up one level and at or below
``down`` moves it down one (never below its start); the level's EMA starts
afresh after a move. Everything is a function of the results fed in, so a
resumed run moves as an uninterrupted one (``state_dict``: levels, EMAs and
the inner strategy's state). ``weights()`` gives each ladder's share to its
current level, 0 to its other levels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import numpy as np

from rlpt.curriculum.samplers import checked_results

LEVELS = ("easy", "medium", "hard")
_LEVEL = re.compile(r"-(easy|medium|hard)(?=-)")


def ladder_of(domain: str) -> tuple[str, int]:
  """(ladder key, level index) of a domain id: the id with its difficulty word
  replaced by "*", and the word's place in LEVELS; ids without one are a
  ladder of their own at level 0."""
  m = None
  for m in _LEVEL.finditer(domain):
    pass  # the last difficulty word: the one rlpt's id scheme puts before -p / -v
  if m is None:
    return domain, 0
  return domain[:m.start()] + "-*" + domain[m.end():], LEVELS.index(m.group(1))


class DifficultyLadders:
  """A domain sampler (the interface of rlpt.curriculum.samplers.DomainSampler)
  over difficulty ladders (see the module doc)."""

  name = "difficulty_ladders"

  def __init__(self, inner_factory, domains: Sequence[str], *, up: float = 0.8,
               down: float = 0.05, alpha: float = 0.1, min_samples: int = 32):
    """``inner_factory(ladder_keys) -> DomainSampler``: the strategy over ladders."""
    if not 0.0 <= down < up <= 1.0:
      raise ValueError(f"adaptive difficulty needs 0 <= down < up <= 1, got down={down}, up={up}.")
    if not 0.0 < alpha <= 1.0:
      raise ValueError(f"adaptive difficulty alpha must be in (0, 1], got {alpha}.")
    if min_samples < 1:
      raise ValueError(f"adaptive difficulty min_samples must be >= 1, got {min_samples}.")
    self.up, self.down, self.alpha, self.min_samples = float(up), float(down), float(alpha), int(min_samples)
    self.domains = tuple(domains)
    rungs: dict[str, dict[int, str]] = {}
    for d in self.domains:
      key, level = ladder_of(d)
      if level in rungs.setdefault(key, {}):
        raise ValueError(f"domains {rungs[key][level]!r} and {d!r} are the same rung of "
                         f"difficulty ladder {key!r}.")
      rungs[key][level] = d
    self.ladders = tuple(rungs)
    # Each ladder's domains, easiest first.
    self._rungs = {k: [r[lv] for lv in sorted(r)] for k, r in rungs.items()}
    self._ladder = {d: k for k, r in self._rungs.items() for d in r}
    self.inner = inner_factory(self.ladders)
    self._level = dict.fromkeys(self.ladders, 0)
    self._count = dict.fromkeys(self.ladders, 0)
    self._ema = dict.fromkeys(self.ladders, 0.0)
    self.moves = 0

  # The interface of DomainSampler, over domains.

  def current(self, ladder: str) -> str:
    return self._rungs[ladder][self._level[ladder]]

  def weights(self) -> dict[str, float]:
    out = dict.fromkeys(self.domains, 0.0)
    for k, w in self.inner.weights().items():
      out[self.current(k)] = w
    return out

  def sample(self, n: int, rng: np.random.Generator) -> list[str]:
    return [self.current(k) for k in self.inner.sample(n, rng)]

  def update(self, results: Mapping[str, Sequence[float]]) -> None:
    by_ladder: dict[str, list[float]] = {}
    for d, v in checked_results(results, self.domains).items():
      k = self._ladder[d]
      by_ladder.setdefault(k, []).extend(v.tolist())
      if d == self.current(k):  # results of another rung (drawn before a move) only feed `inner`
        for x in v:
          self._ema[k] += self.alpha * (x - self._ema[k])
        self._count[k] += len(v)
    for k in sorted(by_ladder):
      self._maybe_move(k)
    self.inner.update(by_ladder)

  def success(self, ladder: str) -> float:
    """The bias-corrected success EMA at the ladder's current level (0 if unseen)."""
    n = self._count[ladder]
    return self._ema[ladder] / (1.0 - (1.0 - self.alpha) ** n) if n else 0.0

  def _maybe_move(self, k: str) -> None:
    if self._count[k] < self.min_samples:
      return
    s, level = self.success(k), self._level[k]
    if s >= self.up and level + 1 < len(self._rungs[k]):
      self._level[k] = level + 1
    elif s <= self.down and level > 0:
      self._level[k] = level - 1
    else:
      return
    self._count[k], self._ema[k] = 0, 0.0
    self.moves += 1

  def metrics(self) -> dict[str, float]:
    """``difficulty/level/<ladder>`` (0 easy .. 2 hard), the mean level over the
    ladders that have more than one rung, and the moves so far."""
    multi = [k for k in self.ladders if len(self._rungs[k]) > 1]
    out = {f"difficulty/level/{k}": float(self._level[k]) for k in multi}
    out["difficulty/mean_level"] = float(np.mean([self._level[k] for k in multi])) if multi else 0.0
    out["difficulty/moves"] = float(self.moves)
    return out

  def state_dict(self) -> dict:
    return {"strategy": self.name, "domains": list(self.domains),
            "stats": {"level": dict(self._level), "count": dict(self._count),
                      "ema": dict(self._ema), "moves": self.moves},
            "inner": self.inner.state_dict()}

  def load_state_dict(self, state: Mapping) -> None:
    if state.get("strategy") != self.name:
      raise ValueError(f"checkpoint is of strategy '{state.get('strategy')}', this sampler is "
                       f"'{self.name}' (curriculum.adaptive_difficulty differs).")
    if list(state["domains"]) != list(self.domains):
      raise ValueError(f"checkpoint domains {list(state['domains'])} differ from the configured "
                       f"{list(self.domains)}.")
    stats = state["stats"]
    self._level = {k: int(stats["level"][k]) for k in self.ladders}
    self._count = {k: int(stats["count"][k]) for k in self.ladders}
    self._ema = {k: float(stats["ema"][k]) for k in self.ladders}
    self.moves = int(stats["moves"])
    self.inner.load_state_dict(state["inner"])
