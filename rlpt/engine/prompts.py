"""The host's book of the engine's shared prompt rows (rlpt.sampling.slots.SharedStore).

A prompt row holds the first ``length_of(prompt)`` tokens of the sequences that
begin with them; the sequences holding it are its *users*. A sequence takes a
row when it is admitted (the row already holding its prompt, else a free
one), keeps it while parked or released, and gives it back when it finishes.
A row no sequence uses keeps its prompt, so a later sequence that begins alike
finds it cached, until the row is taken for another prompt (the least
recently used first).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Sequence


@dataclasses.dataclass(eq=False)
class PromptRow:
  """One row: its prompt tokens, how many of them are cached, its users."""

  row: int
  tokens: tuple[int, ...] = ()
  cached: int = 0
  users: int = 0

  @property
  def complete(self) -> bool:
    return self.cached == len(self.tokens)


class PromptRows:
  """``rows`` prompt rows of up to ``length`` tokens (0 rows: no sharing)."""

  def __init__(self, rows: int, length: int):
    self.length = length if rows else 0
    self._rows = [PromptRow(i) for i in range(rows)]
    self._by_tokens: dict[tuple[int, ...], PromptRow] = {}
    self._unused = collections.OrderedDict((r.row, r) for r in self._rows)   # oldest first

  def length_of(self, prompt: Sequence[int]) -> int:
    """Leading tokens of ``prompt`` a row holds: all but the last (which is a
    sequence's first pending token), at most ``length``."""
    return min(len(prompt) - 1, self.length)

  def acquire(self, tokens: Sequence[int]) -> tuple[PromptRow | None, bool]:
    """(the row holding ``tokens``, whether it already did), or (None, False)
    when every row is in use."""
    key = tuple(tokens)
    row = self._by_tokens.get(key)
    hit = row is not None
    if row is None:
      if not self._unused:
        return None, False
      _, row = self._unused.popitem(last=False)
      self._by_tokens.pop(row.tokens, None)
      row.tokens, row.cached = key, 0
      self._by_tokens[key] = row
    elif row.users == 0:
      del self._unused[row.row]
    row.users += 1
    return row, hit

  def release(self, row: PromptRow) -> None:
    row.users -= 1
    if row.users == 0:
      self._unused[row.row] = row

  def refresh(self) -> int:
    """New weights: every row is to be recomputed; returns the tokens dropped
    from rows in use (an unused row is recomputed only if it is used again)."""
    dropped = sum(r.cached for r in self._rows if r.users)
    for r in self._rows:
      r.cached = 0
    return dropped

  def pending(self) -> list[PromptRow]:
    """Rows in use whose prompt is not all cached."""
    return [r for r in self._rows if r.users and not r.complete]

  @property
  def in_use(self) -> int:
    return sum(1 for r in self._rows if r.users)
