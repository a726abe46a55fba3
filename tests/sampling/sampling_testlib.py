"""Prompt batches shared by the sampling tests."""

from __future__ import annotations

import numpy as np


def right_padded_prompts(b: int, p: int, seed: int, pad: int, bos: int):
  """``b`` right-padded prompts of width ``p`` (ids [b, p], lengths [b]), each
  starting with ``bos``; the first is BOS only and the second fills the width,
  the rest have random lengths in [2, p)."""
  rng = np.random.default_rng(seed)
  lengths = np.array([1, p] + list(rng.integers(2, p, size=b - 2)), np.int32)
  ids = np.full((b, p), pad, np.int32)
  for i, n in enumerate(lengths):
    ids[i, 0] = bos
    ids[i, 1:n] = rng.integers(0, 30, size=n - 1)
  return ids, lengths
