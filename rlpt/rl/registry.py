"""Name -> function registries with helpful errors."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable)


class Registry(dict):
  """A dict of named functions; ``register`` is a decorator."""

  def __init__(self, kind: str):
    super().__init__()
    self.kind = kind

  def register(self, name: str) -> Callable[[F], F]:
    def deco(fn: F) -> F:
      if name in self:
        raise ValueError(f"{self.kind} '{name}' is already registered.")
      self[name] = fn
      return fn
    return deco


def lookup(registry: Registry, name: str) -> Callable:
  if name not in registry:
    close = difflib.get_close_matches(name, list(registry), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ValueError(f"Unknown {registry.kind} '{name}'; known: {sorted(registry)}.{hint}")
  return registry[name]
