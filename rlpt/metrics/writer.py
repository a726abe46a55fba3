"""Writes scalar metrics to ``metrics.jsonl`` and TensorBoard event files."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Mapping

import numpy as np


def _scalar(v) -> float:
  return float(np.asarray(v))


_DOMAIN_KEY = re.compile(r"^(?P<metric>[^/]+)/rlpt/(?P<family>[a-z0-9]+)-(?P<rest>.+)$")


def tensorboard_tag(kind: str, key: str) -> str:
  """TensorBoard groups charts by a tag's first part: a per-domain metric
  ``<metric>/rlpt/<family>-<rest>`` goes to group ``<kind>.<family>`` as
  ``<kind>.<family>/<metric>/<rest>``, so hundreds of domains make a dozen
  groups of charts instead of one; every other metric is ``<kind>/<key>``."""
  m = _DOMAIN_KEY.match(key)
  if m is None:
    return f"{kind}/{key}"
  return f"{kind}.{m['family']}/{m['metric']}/{m['rest']}"


class JsonlLog:
  """An append-only JSON-lines file of rows with a ``step``, cut back on resume."""

  def __init__(self, path: str):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    self.path = path
    self._file = open(self.path, "a", buffering=1)

  def append(self, row: Mapping) -> None:
    self._file.write(json.dumps(row) + "\n")

  def rewind(self, last_step: int) -> int:
    """Drops the rows after ``last_step`` (all rows when it is negative); returns how many.

    A run resumed from the checkpoint of step ``last_step`` replays the steps
    after it; their rows from the killed attempt (and a line torn by the kill)
    go, so the file ends up as an uninterrupted run's. Kept lines stay
    byte-identical.
    """
    self._file.close()
    with open(self.path) as f:
      lines = f.readlines()
    kept = []
    for line in lines:
      try:
        row = json.loads(line)
      except json.JSONDecodeError:
        continue
      if line.endswith("\n") and row["step"] <= last_step:
        kept.append(line)
    tmp = self.path + ".tmp"
    with open(tmp, "w") as f:
      f.writelines(kept)
    os.replace(tmp, self.path)
    self._file = open(self.path, "a", buffering=1)
    return len(lines) - len(kept)

  def close(self) -> None:
    self._file.close()


class MetricsWriter:
  """One JSON object per ``write`` call (``{"step": ..., "kind": ..., **metrics}``)
  in ``metrics.jsonl`` plus TensorBoard scalars (``tensorboard_tag``). Only
  process 0 should own one. ``rewind`` as `JsonlLog`'s (TensorBoard event
  files are append-only and keep both attempts)."""

  def __init__(self, workdir: str, tensorboard: bool = True):
    self._log = JsonlLog(os.path.join(workdir, "metrics.jsonl"))
    self.path = self._log.path
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter
      self._tb = SummaryWriter(os.path.join(workdir, "tensorboard"))

  def write(self, step: int, kind: str, metrics: Mapping[str, float]) -> None:
    row = {"step": int(step), "kind": kind}
    for k, v in metrics.items():
      x = _scalar(v)
      row[k] = x if math.isfinite(x) else str(x)
      if self._tb is not None:
        self._tb.add_scalar(tensorboard_tag(kind, k), x, int(step))
    self._log.append(row)

  def rewind(self, last_step: int) -> int:
    return self._log.rewind(last_step)

  def close(self) -> None:
    self._log.close()
    if self._tb is not None:
      self._tb.close()
