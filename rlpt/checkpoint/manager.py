"""Complete run checkpoints: everything a killed run needs to continue exactly.

One orbax ``CheckpointManager`` step directory per saved step, committed
atomically (orbax writes into a temporary directory and renames it)::

    <directory>/<step>/arrays/   sharded jax.Arrays (policy and value TrainStates);
                                 each process writes its own shards
    <directory>/<step>/trainer/  JSON: step, RNG key data, data-iterator state,
                                 curriculum and KL-controller state, metrics
                                 history, the reference pointer
    <directory>/<step>/config/   JSON: the run config the step was written under
    <directory>/<step>/metrics/  JSON: the best-by metric (orbax's own item)

What the arrays and JSON hold is the caller's business (``rlpt.trainer``);
this module saves them together, keeps the last ``keep`` steps plus the best
one, restores onto whatever shardings the caller's target carries (another
mesh shape reshards on read), and falls back to an older step when the latest
one cannot be read.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import math
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers

log = logging.getLogger(__name__)

ITEMS = ("arrays", "trainer", "config")


@dataclasses.dataclass(frozen=True)
class Restored:
  """One restored step: ``arrays`` laid out like the restore target, JSON as saved."""

  step: int
  arrays: Any
  trainer: dict
  config: dict


@dataclasses.dataclass(frozen=True)
class SaveTiming:
  """Wall seconds of one save: ``blocked`` in the caller, ``total`` until committed."""

  step: int
  total: float
  blocked: float


class NoRestorableCheckpoint(RuntimeError):
  """Every checkpoint in the directory failed to restore (message lists why)."""


def abstract_like(tree: Any) -> Any:
  """ShapeDtypeStructs with the shardings of ``tree``'s arrays: a restore target
  that lays the saved values out exactly like ``tree`` (any mesh)."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)


def model_fingerprint(directory: str) -> str:
  """A cheap identity of a saved model directory (rlpt.checkpoint.save_model).

  Hashes ``model.json`` and the relative path and size of every file under
  the directory, not the weights: enough to notice a different or rebuilt
  base, at no cost for large models. A single-file base (a GGUF file,
  rlpt.models.gguf) is identified by its name, size and first MiB, which
  holds its metadata.
  """
  h = hashlib.sha256()
  directory = os.path.abspath(directory)
  if os.path.isfile(directory):
    with open(directory, "rb") as f:
      h.update(f"{os.path.basename(directory)}:{os.path.getsize(directory)}\n".encode() + f.read(1 << 20))
    return h.hexdigest()[:16]
  # A Hugging Face base (rlpt.models.hf) has config.json where rlpt has model.json.
  meta = "model.json" if os.path.exists(os.path.join(directory, "model.json")) else "config.json"
  with open(os.path.join(directory, meta), "rb") as f:
    h.update(f.read())
  for root, dirs, files in os.walk(directory):
    dirs.sort()
    for name in sorted(files):
      path = os.path.join(root, name)
      h.update(f"{os.path.relpath(path, directory)}:{os.path.getsize(path)}\n".encode())
  return h.hexdigest()[:16]


class RunCheckpointer:
  """Saves and restores run checkpoints in ``directory`` (see the module doc).

  keep: latest steps kept. best_metric / best_mode: also keep the step whose
  ``metrics[best_metric]`` is best ("max" or "min"); None keeps only the
  latest. async_save: ``save`` returns once the arrays are copied to host
  memory and the write continues in a background thread.
  """

  def __init__(self, directory: str, *, keep: int, best_metric: str | None = None,
               best_mode: str = "max", async_save: bool = True):
    if keep < 1:
      raise ValueError(f"keep must be >= 1, got {keep}.")
    if best_mode not in ("max", "min"):
      raise ValueError(f"best_mode must be 'max' or 'min', got '{best_mode}'.")
    self.directory = os.path.abspath(directory)
    self.best_metric = best_metric
    self.async_save = async_save
    self._lock = threading.Lock()
    self._pending: collections.deque = collections.deque()  # (step, t_start, blocked)
    self._done: list[SaveTiming] = []
    worst = -math.inf if best_mode == "max" else math.inf

    def best_fn(metrics: Mapping[str, float]) -> float:
      # Steps saved without the metric rank last, never as the best.
      v = (metrics or {}).get(best_metric)
      return worst if v is None else float(v)

    policies: list = [checkpoint_managers.LatestN(n=keep)]
    if best_metric:
      policies.append(checkpoint_managers.BestN(get_metric_fn=best_fn, reverse=best_mode == "min",
                                                n=1, keep_checkpoints_without_metrics=False))
    options = ocp.CheckpointManagerOptions(
        # best_fn makes orbax store the metrics with each step; which steps
        # survive is up to the preservation policy.
        best_fn=best_fn if best_metric else None,
        best_mode=best_mode,
        preservation_policy=checkpoint_managers.AnyPreservationPolicy(policies),
        enable_async_checkpointing=async_save,
        async_options=(ocp.AsyncOptions(post_finalization_callback=self._on_committed)
                       if async_save else None),
        cleanup_tmp_directories=True,
        create=True,
    )
    self._manager = ocp.CheckpointManager(self.directory, options=options, item_names=ITEMS)

  # --------------------------------------------------------------------------
  # Saving.

  def save(self, step: int, arrays: Any, trainer: dict, config: dict,
           metrics: Mapping[str, float] | None = None) -> float:
    """Saves one step; returns the seconds the caller was blocked.

    Every process must call it (each writes its own shards); the JSON items
    are written by the primary process. ``metrics`` may hold anything; only
    a finite ``best_metric`` is kept for ranking.
    """
    kept = {}
    if self.best_metric and metrics is not None:
      v = metrics.get(self.best_metric)
      if v is not None and math.isfinite(float(v)):
        kept[self.best_metric] = float(v)
    t0 = time.perf_counter()
    with self._lock:
      self._pending.append([step, t0, None])
    self._manager.save(step, args=ocp.args.Composite(
        arrays=ocp.args.StandardSave(arrays), trainer=ocp.args.JsonSave(trainer),
        config=ocp.args.JsonSave(config)), metrics=kept if self.best_metric else None)
    blocked = time.perf_counter() - t0
    with self._lock:
      for entry in self._pending:
        if entry[0] == step:
          entry[2] = blocked
    if not self.async_save:
      self._on_committed()
    return blocked

  def _on_committed(self) -> None:
    """Called once per committed save (orbax's finalisation thread when async).

    Orbax finishes saves in order, one at a time, so the oldest pending save
    is the one that just committed.
    """
    now = time.perf_counter()
    with self._lock:
      if self._pending:
        step, t0, blocked = self._pending.popleft()
        self._done.append(SaveTiming(step, now - t0, blocked if blocked is not None else now - t0))

  def finished(self) -> list[SaveTiming]:
    """Timings of the saves committed since the last call."""
    with self._lock:
      done, self._done = self._done, []
    return done

  def wait(self) -> None:
    """Blocks until every started save is committed."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()

  # --------------------------------------------------------------------------
  # Restoring.

  def steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def best_step(self) -> int | None:
    return self._manager.best_step()

  def restore(self, abstract_arrays: Any, step: int | None = None) -> Restored | None:
    """Restores ``step``, or the latest readable step when ``step`` is None.

    ``abstract_arrays``: the arrays' target (``abstract_like(live_arrays)``);
    its shardings decide the layout, so a different mesh works. Returns None
    when there is no checkpoint. A latest step that fails to read (a file
    missing, truncated or unparsable) is moved aside to ``corrupt-<step>``
    with a warning naming the error, and the previous step is tried; if no
    step reads, raises ``NoRestorableCheckpoint`` rather than silently
    starting over (a config that no longer matches the checkpoints fails on
    every step).
    """
    if step is not None:
      return self._restore_step(step, abstract_arrays)
    errors, failed = [], []
    for s in reversed(self.steps()):
      try:
        restored = self._restore_step(s, abstract_arrays)
      except Exception as e:  # orbax / tensorstore / json raise many kinds
        msg = f"{type(e).__name__}: {e}"
        errors.append(f"step {s}: {msg}")
        failed.append(s)
        log.warning("Checkpoint step %d in %s cannot be restored (%s); trying the previous one.",
                    s, self.directory, msg[:2000])
        continue
      if failed:
        self._set_aside(failed)
      return restored
    if errors:
      raise NoRestorableCheckpoint(
          f"No checkpoint in {self.directory} could be restored:\n  " + "\n  ".join(
              m[:1000] for m in errors) + "\nFix or remove them, or use another workdir.")
    return None

  def _restore_step(self, step: int, abstract_arrays: Any) -> Restored:
    out = {}
    # One item at a time, so an error names the part of the step that is bad.
    for name, args in (("trainer", ocp.args.JsonRestore()), ("config", ocp.args.JsonRestore()),
                       ("arrays", ocp.args.StandardRestore(abstract_arrays))):
      try:
        out[name] = self._manager.restore(step, args=ocp.args.Composite(**{name: args}))[name]
      except Exception as e:
        raise ValueError(f"item '{name}' ({os.path.join(self.directory, str(step), name)}): "
                         f"{type(e).__name__}: {e}") from e
    trainer, config = out["trainer"], out["config"]
    if not isinstance(trainer, dict) or trainer.get("step") != step:
      raise ValueError(f"the trainer state of step {step} names step "
                       f"{trainer.get('step') if isinstance(trainer, dict) else trainer!r}.")
    if not isinstance(config, dict):
      raise ValueError(f"the config of step {step} is not a JSON object: {config!r}.")
    return Restored(step, out["arrays"], trainer, config)

  def _set_aside(self, steps: list[int]) -> None:
    """Renames unreadable steps out of orbax's view (kept for inspection)."""
    if jax.process_index() == 0:
      for s in steps:
        src = os.path.join(self.directory, str(s))
        dst = os.path.join(self.directory, f"corrupt-{s}-{int(time.time())}")
        if os.path.exists(src):
          os.replace(src, dst)
          log.warning("Moved unreadable checkpoint %s to %s.", src, dst)
    if jax.process_count() > 1:
      from jax.experimental import multihost_utils
      multihost_utils.sync_global_devices("rlpt_checkpoint_set_aside")
    self._manager.reload()


def jsonable(x):
  """numpy scalars and arrays inside ``x`` as Python numbers and lists (exact)."""
  if isinstance(x, dict):
    return {str(k): jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [jsonable(v) for v in x]
  if isinstance(x, (np.ndarray, np.generic)):
    return x.tolist()
  return x


def json_diff(old, new, path: str = "config") -> list[str]:
  """Dotted paths where two JSON trees differ, with both values."""
  if isinstance(old, dict) and isinstance(new, dict):
    return [d for k in sorted(set(old) | set(new))
            for d in json_diff(old.get(k), new.get(k), f"{path}.{k}")]
  if old != new and not (isinstance(old, float) and isinstance(new, float)
                         and math.isnan(old) and math.isnan(new)):
    return [f"{path}: {old!r} -> {new!r}"]
  return []


def check_resume(restored: Restored, directory: str, *, base_path: str, fingerprint: str,
                 config: dict, keys: str) -> None:
  """Refuses a run checkpoint trained against another reference model; warns
  when it was written under another config or random-key scheme."""
  t = restored.trainer
  ref = t["reference"]
  if ref["fingerprint"] != fingerprint:
    raise ValueError(
        f"checkpoint step {restored.step} in {directory} was trained against the reference "
        f"{ref['path']} "
        f"(fingerprint {ref['fingerprint']}), but this run's base is {base_path} (fingerprint "
        f"{fingerprint}); resuming would change the KL term. Point base.checkpoint at the "
        "original model or use a new workdir.")
  changed = json_diff(restored.config, config)
  if changed:
    log.warning("Resuming step %d under a changed config: %s", restored.step,
                "; ".join(changed[:20]))
  if t.get("keys") != keys:
    # Checkpoints before rlpt.keys saved a split-off RNG state instead.
    log.warning("Checkpoint step %d was written with random keys %s; this run derives them as "
                "%s (rlpt.keys). It resumes with the weights, data and curriculum state, but "
                "later steps sample differently from the run that wrote it.",
                restored.step, t.get("keys", "split from a saved RNG state"), keys)
