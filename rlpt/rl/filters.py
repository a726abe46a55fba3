"""Batch filters of DAPO (Yu et al. 2025): dynamic sampling and overlong handling; truncated
importance weights of samples from a stale or int8 sampler.

Host-side NumPy, applied to a rollout before it is put on device. Rows are
grouped as consecutive blocks of ``group_size`` samples of one prompt.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np


def groups_with_signal(rewards_GxK: np.ndarray, valid_GxK: np.ndarray | None = None,
                       atol: float = 0.0) -> np.ndarray:
  """Which groups have non-zero reward variance, [G] bool.

  A group whose valid members all got the same reward has zero advantage under
  any group baseline, so it only dilutes the batch. Groups with fewer than two
  valid members carry no comparison and are dropped too. ``atol`` treats a
  population std <= atol as zero (for noisy continuous rewards). Equal valid
  rewards have no signal whatever ``atol``: the std is taken of the rewards
  minus the group's first valid one, so those deviations are exact zeros (a
  float64 mean of seven 0.1s is off by an ulp, which ``std > 0`` would count).
  """
  r = np.asarray(rewards_GxK, np.float64)
  if r.ndim != 2:
    raise ValueError(f"rewards_GxK must be [groups, group_size], got shape {r.shape}.")
  w = np.ones_like(r) if valid_GxK is None else np.asarray(valid_GxK, np.float64)
  if w.shape != r.shape:
    raise ValueError(f"valid_GxK shape {w.shape} != rewards_GxK shape {r.shape}.")
  n = w.sum(axis=1)
  valid = w > 0
  first = np.argmax(valid, axis=1)[:, None]
  d = np.where(valid, r - np.take_along_axis(r, first, axis=1), 0.0)
  mean = (d * w).sum(axis=1) / np.maximum(n, 1.0)
  dev = np.where(valid, d - mean[:, None], 0.0)
  std = np.sqrt(((dev ** 2) * w).sum(axis=1) / np.maximum(n, 1.0))
  return (n >= 2) & (std > atol)


class FilledBatch(NamedTuple):
  """arrays: the kept groups' rows, ``num_groups * group_size`` rows per key.
  num_groups: groups kept (== target when complete).
  rollouts_used: leading candidates consumed (later ones were not needed).
  groups_seen: groups examined in those rollouts.
  complete: whether the target was reached.
  """

  arrays: dict[str, np.ndarray]
  num_groups: int
  rollouts_used: int
  groups_seen: int
  complete: bool


def fill_groups(candidates: Sequence[Mapping[str, np.ndarray]], target_groups: int,
                group_size: int, reward_key: str = "rewards", valid_key: str | None = None,
                atol: float = 0.0) -> FilledBatch:
  """Dynamic sampling: keeps groups with reward variance, in order, until ``target_groups``.

  candidates: successive rollouts, each a dict of per-sample arrays with the
    same keys and a leading dim that is a multiple of ``group_size``.
  Surplus groups of the last rollout used are discarded (as in DAPO), so the
  batch shape is fixed. With too few informative groups the result has
  ``complete=False`` and the caller samples another rollout (or gives up).
  """
  if target_groups < 1:
    raise ValueError(f"target_groups must be >= 1, got {target_groups}.")
  if group_size < 1:
    raise ValueError(f"group_size must be >= 1, got {group_size}.")
  keys: tuple[str, ...] | None = None
  parts: dict[str, list[np.ndarray]] = {}
  kept = seen = used = 0
  for i, cand in enumerate(candidates):
    if keys is None:
      keys = tuple(cand)
      if reward_key not in cand:
        raise ValueError(f"candidate 0 has no '{reward_key}' array; keys: {sorted(cand)}.")
      parts = {k: [] for k in keys}
    elif set(cand) != set(keys):
      raise ValueError(f"candidate {i} keys {sorted(cand)} != candidate 0 keys {sorted(keys)}.")
    b = len(cand[reward_key])
    for k in keys:
      if len(cand[k]) != b:
        raise ValueError(f"candidate {i}: '{k}' has {len(cand[k])} rows, '{reward_key}' has {b}.")
    if b % group_size:
      raise ValueError(f"candidate {i} has {b} rows, not a multiple of group_size {group_size}.")
    rewards = np.asarray(cand[reward_key]).reshape(-1, group_size)
    valid = None if valid_key is None else np.asarray(cand[valid_key]).reshape(-1, group_size)
    keep_G = np.flatnonzero(groups_with_signal(rewards, valid, atol))
    take = keep_G[:target_groups - kept]
    rows = (take[:, None] * group_size + np.arange(group_size)).reshape(-1)
    for k in keys:
      parts[k].append(np.asarray(cand[k])[rows])
    used = i + 1
    kept += len(take)
    # Groups examined: all of them, or up to the last one taken once the target is hit.
    seen += rewards.shape[0] if kept < target_groups else int(take[-1]) + 1
    if kept == target_groups:
      break
  if keys is None:
    raise ValueError("fill_groups needs at least one candidate rollout.")
  arrays = {k: np.concatenate(v, axis=0) for k, v in parts.items()}
  return FilledBatch(arrays, kept, used, seen, kept == target_groups)


def truncated_B(completion_len_B: np.ndarray, stopped_B: np.ndarray,
                max_new_tokens: int) -> np.ndarray:
  """[B] bool: the answer hit ``max_new_tokens`` without emitting a stop (EOS) token."""
  return (~np.asarray(stopped_B, bool)) & (np.asarray(completion_len_B) >= max_new_tokens)


def overlong_filter_BxT(loss_mask_BxT: np.ndarray, truncated: np.ndarray) -> np.ndarray:
  """Loss mask with truncated answers removed (DAPO overlong filtering), [B, T].

  A truncated answer's reward says nothing about its unfinished reasoning;
  training on it teaches to stop early. Its reward still enters its group's
  statistics (zero ``valid_B`` instead to drop it from those too).
  """
  return np.asarray(loss_mask_BxT) * (~np.asarray(truncated, bool))[:, None]


def soft_overlong_penalty_B(completion_len_B: np.ndarray, max_len: int, buffer: int,
                            factor: float = 1.0) -> np.ndarray:
  """DAPO soft overlong punishment, [B] float32, added to the reward.

  0 up to ``max_len - buffer`` tokens, then falls linearly to ``-factor`` at
  ``max_len``; ``-factor`` beyond it. Penalising only the last ``buffer``
  tokens tells the policy length matters before answers are cut.
  """
  if max_len < 1:
    raise ValueError(f"max_len must be >= 1, got {max_len}.")
  if not 0 < buffer <= max_len:
    raise ValueError(f"buffer must be in (0, max_len={max_len}], got {buffer}.")
  if factor < 0:
    raise ValueError(f"factor must be >= 0, got {factor}.")
  n = np.asarray(completion_len_B, np.float64)
  start = max_len - buffer
  pen = np.where(n <= start, 0.0, (start - n) / buffer * factor)
  return np.where(n > max_len, -factor, pen).astype(np.float32)
