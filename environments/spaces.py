"""Gymnasium spaces for free-form text.

`gymnasium.spaces.Text` only contains strings over a fixed character set, so a
model that emits an unexpected byte would produce an action outside the action
space. RL environments here must accept *any* model output and grade it (a bad
output is a verdict, not an exception), so observations and actions use
`AnyText`: every `str` up to `max_length` characters.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium import spaces

# Printable ASCII plus a few characters outside it, so sampled actions
# exercise the "non-ASCII model output" path of every verifier.
_DEFAULT_SAMPLE_CHARS = string.printable + "\u00e9\u00df\u4e2d\U0001f600"


class AnyText(spaces.Space[str]):
    """Any Python `str` whose length is at most `max_length` characters.

    Lengths are in Unicode code points (`len(str)`), not bytes.
    `sample()` draws a uniform length in [0, max_length] and characters from
    `sample_chars` (printable ASCII plus a few non-ASCII code points by default).
    """

    def __init__(
        self,
        max_length: int,
        *,
        sample_chars: str = _DEFAULT_SAMPLE_CHARS,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        if not isinstance(max_length, (int, np.integer)) or max_length < 0:
            raise ValueError(f"max_length must be a non-negative int, got {max_length!r}")
        if not sample_chars:
            raise ValueError("sample_chars must be non-empty")
        self.max_length = int(max_length)
        self._sample_chars = tuple(dict.fromkeys(sample_chars))
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        # Unbounded character set: there is no fixed-size one-hot encoding.
        return False

    def sample(self, mask: Any | None = None, probability: Any | None = None) -> str:
        """A random string; `mask`/`probability` are not supported (unbounded charset)."""
        if mask is not None or probability is not None:
            raise ValueError("AnyText.sample does not support mask or probability")
        length = int(self.np_random.integers(0, self.max_length + 1))
        picks = self.np_random.integers(0, len(self._sample_chars), size=length)
        return "".join(self._sample_chars[i] for i in picks)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def to_jsonable(self, sample_n: Any) -> list[str]:
        return list(sample_n)

    def from_jsonable(self, sample_n: list[str]) -> list[str]:
        return list(sample_n)

    def __repr__(self) -> str:
        return f"AnyText({self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AnyText) and other.max_length == self.max_length

    def __hash__(self) -> int:
        return hash(("AnyText", self.max_length))
