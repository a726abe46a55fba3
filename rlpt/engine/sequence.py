"""The engine's record of one sequence (``SeqState``) and of one sampled turn (``Turn``)."""

from __future__ import annotations

import dataclasses
from typing import Hashable, NamedTuple

import numpy as np

from rlpt.engine.prompts import PromptRow


class Turn(NamedTuple):
  """One sampled turn: its tokens and log-probs, the policy version of each
  token, and whether it ended on a stop token (else on its budget)."""

  seq: Hashable
  tokens: np.ndarray
  logprobs: np.ndarray
  versions: np.ndarray
  stopped: bool


@dataclasses.dataclass
class SeqState:
  """One sequence in the engine: its conversation, this turn's key and budget,
  its slot (None: waiting or released) and how much of it the slot caches,
  this turn's sampled tokens, and its shared prompt row (``plen`` tokens)."""

  id: Hashable
  tokens: list[int]          # the conversation; its last token is pending, not cached
  key: np.ndarray
  budget: int
  slot: int | None = None
  cached: int = 0
  sampled: list = dataclasses.field(default_factory=list)
  logprobs: list = dataclasses.field(default_factory=list)
  versions: list = dataclasses.field(default_factory=list)
  prefilled: int = 0
  plen: int = 0                      # leading tokens held by a shared prompt row
  prompt: PromptRow | None = None

  @property
  def prompt_row(self) -> int:
    """The shared prompt row it reads (0, read nowhere, when it has none)."""
    return self.prompt.row if self.prompt is not None else 0

  @property
  def conversation(self) -> list[int]:
    """Every token so far, this turn's sampled ones included; the last is pending."""
    return self.tokens + self.sampled if self.sampled else self.tokens
