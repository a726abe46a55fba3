"""Asynchronous rollout: `AsyncRolloutSource`, batches played ahead of the update.

With ``rollout.staleness`` (or ``rollout.domain_staleness``) k > 0 the batch
("wave") of update w is sampled with the policy of version ``w - 1 - k``
while updates w - k .. w - 1 run (`rlpt.rollout.pipeline.AsyncRollout` holds
the threads). Which version a wave uses, its tasks, its keys and the
curriculum state it is drawn under do not depend on thread timing, so an
asynchronous run is as reproducible as a synchronous one:

- each wave is *prepared* in wave order: the curriculum updates of every
  version up to the one it samples with are applied first (the point a
  synchronous run would have applied them), then its tasks are drawn;
- the loop's ``publish`` logs the step's curriculum update instead of
  applying it, and keeps the sampler's copy of each version still needed
  (snapshots);
- a checkpoint saves the task iterator and curriculum as of the last trained
  wave, plus the updates it had not applied: waves in flight are dropped and
  regenerated after a resume.
"""

from __future__ import annotations

import collections
import concurrent.futures

import jax
import numpy as np
from flax import nnx

from rlpt.rollout.batch import RolloutBatch, merge_parts
from rlpt.rollout.pipeline import AsyncRollout
from rlpt.rollout.sections import SourceConfig
from rlpt.rollout.source import RolloutSource


class AsyncRolloutSource(RolloutSource):
  """`RolloutSource` whose batches are played up to ``rollout.max_staleness``
  updates ahead, by producer threads (same constructor)."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    self.pipeline: AsyncRollout | None = None
    # The sampler's weights of each version a wave may still sample with.
    self.snapshots: dict[int, nnx.State] = {}
    # Each step's curriculum update, kept until every wave still to be trained
    # or checkpointed has applied it; the last version the producer applied.
    self.curriculum_log: dict[int, dict] = {}
    self.curriculum_applied = 0
    self._consumed_state: dict | None = None  # iterator/curriculum as of the last trained wave

  def next_batch(self, step: int) -> tuple[RolloutBatch, dict]:
    self._warm_draft()
    if self.pipeline is None:
      self.snapshots = {step - 1: self.samplers.params}
      self.pipeline = AsyncRollout(self._prepare_wave, self._execute_wave, self.cfg.max_staleness,
                                   step, start=False)
      self.pipeline.start()
    wave = self.pipeline.get(step)
    (batch, metrics, self._consumed_state), version = wave.item, wave.version
    metrics["async/wait"] = wave.wait_s
    metrics["async/ready_waves"] = float(wave.ready)
    if batch.version is None:
      metrics["async/staleness"] = float(step - 1 - version)
    else:
      # Per sample: the mean, the largest, and each domain's (budgets differ by domain).
      lag = step - 1 - batch.version
      metrics["async/staleness"] = float(lag.mean())
      metrics["async/staleness_max"] = float(lag.max())
      # The histogram: the share of samples k updates old, for k = 0..bound.
      for k in range(self.cfg.max_staleness + 1):
        metrics[f"async/staleness_share/{k}"] = float(np.mean(lag == k))
      records = batch.records
      for d in sorted({r["domain"] for r in records}):
        metrics[f"async/staleness/{d}"] = float(np.mean(
            [x for x, r in zip(lag, records) if r["domain"] == d]))
    return self._serve(step, batch, metrics)

  def weights_of(self, version: int):
    """The weights of ``version``: the newest published, or one of the last
    ``max_staleness + 1`` the producers keep."""
    newest, weights = self.latest
    return weights if version == newest else self.snapshots[version]

  def _feed_curriculum(self, step: int, by_domain: dict[str, list[float]]) -> None:
    """Logs the step's curriculum update and publishes its weights to the producers."""
    # The producer applies it before drawing the first wave sampled with this
    # step's weights (the same point a synchronous run would).
    with self.curriculum_lock:
      self.curriculum_log[step] = by_domain
      # The consumed wave's curriculum state includes these; no wave needs them again.
      done = self._consumed_state["curriculum_applied"]
      for s in [s for s in self.curriculum_log if s <= done]:
        del self.curriculum_log[s]
    self.snapshots[step] = self.samplers.params
    for v in [v for v in self.snapshots if v < step - self.cfg.max_staleness]:
      del self.snapshots[v]
    self.pipeline.publish(step)

  def state_dict(self) -> dict:
    if self._consumed_state is None:
      return super().state_dict()
    with self.curriculum_lock:
      applied = self._consumed_state["curriculum_applied"]
      return {"tasks": self._consumed_state["tasks"],
              "curriculum": self._consumed_state["curriculum"],
              "curriculum_applied": applied,
              "curriculum_log": {str(k): v for k, v in self.curriculum_log.items() if k > applied}}

  def load_state_dict(self, state: dict, step: int) -> None:
    super().load_state_dict(state, step)
    self.curriculum_log = {int(k): v for k, v in state.get("curriculum_log", {}).items()}
    self.curriculum_applied = state.get("curriculum_applied", 0)

  def close(self) -> None:
    if self.pipeline is not None:
      self.pipeline.close()
    super().close()

  # --------------------------------------------------------------------------
  # The producer.

  def _prepare_wave(self, wave: int, version: int):
    """In wave order: curriculum updates up to ``version``, then the wave's
    tasks (all of its rollout under dynamic sampling, whose later draws depend
    on earlier results)."""
    with self.curriculum_lock:
      for s in sorted(k for k in self.curriculum_log if self.curriculum_applied < k <= version):
        self.domain_sampler.update(self.curriculum_log[s])
      self.curriculum_applied = max(self.curriculum_applied, version)
      key = self.batch_key(wave)  # wave w is trained by update w, as in a synchronous run
      done = tasks = None
      if not self.rl.dynamic_sampling:
        tasks = self.task_stream.next_tasks(self.domain_sampler)
    if self.rl.dynamic_sampling:
      # Not under the lock: the rollout takes it for each of its draws only, so
      # the loop's publish (which takes it to log the step's curriculum update)
      # does not wait for this whole rollout. Only prepares, which run one at a
      # time in wave order, change the sampler and the task stream.
      done = self.rollout(version, key=key)
    with self.curriculum_lock:
      state = {"tasks": self.task_stream.state_dict(),
               "curriculum": self.domain_sampler.state_dict(), "curriculum_applied": version}
    return done, tasks, key, state

  def _execute_wave(self, wave: int, version: int, prepared):
    """Concurrently with other waves: generate and grade.

    With per-domain budgets (``rollout.domain_staleness``) the wave is played in
    parts, one per budget k, concurrently: part k waits for the policy of
    update ``wave - 1 - k`` and samples with it, so slower-lagging domains
    start first and fresher ones join as their weights are published.
    """
    done, tasks, key, state = prepared
    if done is not None:
      batch, metrics = done
      return batch.with_version(version), metrics, state
    parts = collections.defaultdict(list)
    for i, task in enumerate(tasks):
      parts[self.cfg.staleness_of(task.domain)].append(i)
    if len(parts) == 1:
      v = self.pipeline.version_for(wave, next(iter(parts)))
      self.pipeline.wait_version(v)
      batch, metrics = self.rollout_once(len(tasks), v, jax.random.fold_in(key, 0), tasks=tasks)
      return batch.with_version(v), metrics, state

    def play(k: int, idx: list[int]):
      v = self.pipeline.version_for(wave, k)
      self.pipeline.wait_version(v)
      # Padded to the whole batch: a part's size changes every step, and a
      # program per size would cost more compiling than the rows it saves.
      b, t = self.rollout_once(len(idx), v, jax.random.fold_in(key, 1 + k),
                               tasks=[tasks[i] for i in idx], bucket_rows=False)
      return idx, b.with_version(v), t

    order = sorted(parts, reverse=True)  # the longest-lagging part first
    with concurrent.futures.ThreadPoolExecutor(len(order), "rlpt-wave-part") as ex:
      results = [f.result() for f in [ex.submit(play, k, parts[k]) for k in order]]
    batch, metrics = merge_parts(results, self.cfg.group_size, self.tokenizer.pad_id)
    return batch, metrics, state


def make_rollout_source(cfg: SourceConfig, *args, **kwargs) -> RolloutSource:
  """The synchronous source, or the asynchronous one when ``rollout.max_staleness`` > 0
  (arguments as `RolloutSource`)."""
  cls = AsyncRolloutSource if cfg.rollout.max_staleness else RolloutSource
  return cls(cfg, *args, **kwargs)
