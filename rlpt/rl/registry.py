"""Name -> function registries with helpful errors."""

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
