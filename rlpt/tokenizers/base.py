"""The interface every tokenizer implements (byte-level now, HF `tokenizers` later)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Tokenizer(Protocol):
  """Text <-> token ids. Special ids are attributes, not magic numbers.

  ``chat_template``: the checkpoint's Jinja chat template, or None (the
  byte-level tokenizer, base models); rlpt.tokenizers.chat reads it.
  """

  vocab_size: int
  bos_id: int
  eos_id: int
  pad_id: int
  chat_template: str | None

  def encode(self, text: str) -> list[int]:
    """Ids for ``text`` without BOS/EOS."""
    ...

  def decode(self, ids: list[int]) -> str:
    """Text for ``ids``; special ids are dropped; never raises on bad bytes."""
    ...
