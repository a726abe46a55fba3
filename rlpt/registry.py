"""The registries of names a config may use, a leaf of rlpt: it imports nothing
from rlpt, so `rlpt.config` checks names through it without importing the
packages that fill it.

Each registry maps a name to its function or class and the facts recorded
where it is registered (``@POLICY_LOSSES.register("ppo_clip")`` in
`rlpt.rl.losses`, ...). Importing `rlpt` imports the packages that register
(`rlpt.rl`, `rlpt.curriculum`), so the registries are full wherever a config
is built. ``CONFIG_CHECKS`` holds the checks of a run config that need those
packages (``check(cfg)`` raising ValueError), run by ``TrainConfig``.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable)


class Registry(dict):
  """A dict of named functions; ``register`` is a decorator.

  ``register(name, **facts)`` also records facts about the entry (e.g. an
  advantage estimator's ``group_baseline``), read with ``fact(name, key)``:
  what the rest of the code needs to know about an entry is said where it is
  registered, not in lists of names elsewhere."""

  def __init__(self, kind: str):
    super().__init__()
    self.kind = kind
    self._facts: dict[str, dict[str, Any]] = {}

  def register(self, name: str, **facts: Any) -> Callable[[F], F]:
    def deco(fn: F) -> F:
      if name in self:
        raise ValueError(f"{self.kind} '{name}' is already registered.")
      self[name] = fn
      self._facts[name] = dict(facts)
      return fn
    return deco

  def fact(self, name: str, key: str, default: Any = None) -> Any:
    """A recorded fact of entry ``name`` (an unknown name raises as `lookup` does)."""
    lookup(self, name)
    return self._facts.get(name, {}).get(key, default)


def lookup(registry: Registry, name: str) -> Callable:
  if name not in registry:
    close = difflib.get_close_matches(name, list(registry), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ValueError(f"Unknown {registry.kind} '{name}'; known: {sorted(registry)}.{hint}")
  return registry[name]


ADVANTAGE_ESTIMATORS = Registry("advantage estimator")   # rlpt.rl.advantages
POLICY_LOSSES = Registry("policy loss")                  # rlpt.rl.losses
KL_ESTIMATORS = Registry("KL estimator")                 # rlpt.rl.losses
AGGREGATIONS = Registry("loss aggregation")              # rlpt.rl.losses
KL_CONTROLLERS = Registry("KL controller")               # rlpt.rl.kl
DOMAIN_SAMPLERS = Registry("domain sampling strategy")   # rlpt.curriculum.samplers
CONFIG_CHECKS = Registry("config check")                 # rlpt.curriculum.from_config


def needs_value_model(advantage: str) -> bool:
  """Whether advantage estimator ``advantage`` needs a critic (it computes returns)."""
  return ADVANTAGE_ESTIMATORS.fact(advantage, "with_returns") is not None


def is_group_baseline(advantage: str) -> bool:
  """Whether ``advantage``'s baseline is the group's (GRPO-style: group_size >= 2)."""
  return bool(ADVANTAGE_ESTIMATORS.fact(advantage, "group_baseline", False))
