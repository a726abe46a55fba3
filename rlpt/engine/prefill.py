"""The host's layout of one prefill call's arrays (rlpt.engine.engine).

Two forms. *Packed* (``pack``): chunks of fresh sequences or prompt rows
(nothing cached before them) back to back, first fit, several to a call row
of C tokens (rlpt.sampling.packed). *Rows* (``RowCall``): one chunk a row, at
its own start position (a prompt's later chunks, an observation appended to a
parked episode), reading what its store row caches before it
(rlpt.sampling.slots.prefill_rows). Out-of-range store rows mark padding.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def pack(chunks: Sequence[tuple[int, Sequence[int]]], rows: int, c: int,
         nowhere: int) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[int]]:
  """(store row, tokens) chunks of at most ``c`` tokens, first fit in order
  into ``rows`` call rows of ``c``: returns ((row_AxC, tokens_AxC,
  position_AxC), the indices of the chunks placed)."""
  row_a = np.full((rows, c), nowhere, np.int32)
  tokens, positions = np.zeros((rows, c), np.int32), np.zeros((rows, c), np.int32)
  used, placed = np.zeros(rows, np.int64), []
  for i, (row, toks) in enumerate(chunks):
    n = len(toks)
    if not 0 < n <= c:
      raise ValueError(f"a packed chunk has 1 to {c} tokens, got {n}.")
    free = np.flatnonzero(used + n <= c)
    if not len(free):
      continue
    a, at = free[0], used[free[0]]
    row_a[a, at:at + n], tokens[a, at:at + n], positions[a, at:at + n] = row, toks, np.arange(n)
    used[a] += n
    placed.append(i)
  return (row_a, tokens, positions), placed


class RowCall:
  """A call of ``rows`` rows of ``c`` tokens, one chunk a row: ``add`` until
  ``full``; ``arrays`` -> (row_A, tokens_AxC, start_A, prompt_row_A, prompt_len_A)."""

  def __init__(self, rows: int, c: int, nowhere: int):
    self.row = np.full(rows, nowhere, np.int32)
    self.tokens = np.zeros((rows, c), np.int32)
    self.start, self.prompt_row, self.prompt_len = (np.zeros(rows, np.int32) for _ in range(3))
    self.n = 0

  @property
  def full(self) -> bool:
    return self.n == len(self.row)

  def add(self, row: int, tokens: Sequence[int], start: int, prompt_row: int = 0,
          prompt_len: int = 0) -> None:
    i = self.n
    self.row[i], self.start[i], self.prompt_row[i], self.prompt_len[i] = (
        row, start, prompt_row, prompt_len)
    self.tokens[i, :len(tokens)] = tokens
    self.n += 1

  def arrays(self) -> tuple[np.ndarray, ...]:
    return self.row, self.tokens, self.start, self.prompt_row, self.prompt_len

  def reach(self) -> int:
    """The last store position (exclusive) its rows write: what a bound must hold."""
    return int((self.start - self.prompt_len)[:self.n].max()) + self.tokens.shape[1]
