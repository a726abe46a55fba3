"""The single-controller RL loop over four components::

    batch, rollout_metrics = rollout.next_batch(step)   # RolloutSource: tasks, environments, sampler
    metrics = actor.update(batch, step)           # Actor: policy / reference / critic, the update
    metrics |= rollout.publish(step, actor.sampling_weights())
    if evaluator.due(step, steps): evaluator.run(rollout.play, step, ...)   # Evaluator
    checkpointer.save(step, actor.arrays(), state_dict())             # RunCheckpointer

Every ``eval.every`` steps the policy decodes a fixed held-out task set per
domain; every ``checkpoint.every`` steps the whole run state is saved
(weights, optimizer, data-iterator, curriculum and KL-controller state,
metrics history) and ``run`` resumes from the latest checkpoint reproducing
the steps an uninterrupted run would have taken. Every random key is a pure
function of the seed, the step and its purpose (rlpt.keys), so how often the
run evaluates does not change what it trains on. ``Trainer`` is a plain
object so a notebook can drive it (or its components) step by step;
``launch/train.py`` is a thin absl wrapper around ``train(cfg, workdir)``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence

from rlpt.actor import Actor
from rlpt.update import ActorConfig, Base
from rlpt.checkpoint import (RunCheckpointer, abstract_like, check_resume, jsonable,
                             model_fingerprint)
from rlpt.config import TrainConfig, to_json
from rlpt.data import Task
from rlpt.evaluation import Evaluator
from rlpt.metrics.report import MASKED
from rlpt.keys import KEY_SCHEME
from rlpt.metrics import RunLog, progress_bar
from rlpt.bases import imported_base, resolve_base, resolve_tokenizer
from rlpt.rollout.async_source import make_rollout_source
from rlpt.rollout.domains import check_domains
from rlpt.rollout.pool_api import EnvironmentPool
from rlpt.rollout.sections import SampledModel, SourceConfig
from rlpt.device import (MAX_PROGRAMS, ProgramPool, RunContext, check_batch, host_metrics,
                         is_primary)
from rlpt.sharding import make_mesh

log = logging.getLogger(__name__)


class Trainer:
  """One run: its actor, rollout source, evaluator, checkpoints and metrics."""

  def __init__(self, cfg: TrainConfig, workdir: str, *, max_programs: int = MAX_PROGRAMS,
               env_pool: EnvironmentPool | None = None):
    """``max_programs``: the bound of the run's compiled programs (`ProgramPool`);
    ``env_pool``: the environments to play in (default: from ``cfg.env``;
    the trainer closes it)."""
    self.cfg, self.workdir = cfg, workdir
    ro = cfg.rollout
    # Before anything is written or compiled; prompt lengths in characters
    # bound tokens only for the built-in byte-level bases.
    check_domains(cfg.domains, None if imported_base(cfg.base) else ro.max_prompt_len, cfg.env.prompt_style)
    if is_primary():
      os.makedirs(workdir, exist_ok=True)
      with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(to_json(cfg))
    self.tokenizer = resolve_tokenizer(cfg.base)
    # Two layouts from the config's rules: training (FSDP + tensor) for the
    # update and the reference pass, sampling (tensor only) for the sampler.
    self.ctx = ctx = RunContext(make_mesh(cfg.mesh.as_dict()), cfg.sharding.train_rules,
                                cfg.sharding.sample_rules, cfg.seed, self.tokenizer,
                                ProgramPool(max_programs))
    self.mesh = ctx.mesh
    check_batch(ro.batch_size, ctx.mesh, ctx.train_rules, "rollout.batch_size")
    check_batch(ro.batch_size // cfg.rl.minibatches, ctx.mesh, ctx.train_rules,
                "rollout.batch_size / rl.minibatches")
    check_batch(ro.batch_size, ctx.mesh, ctx.sample_rules, "rollout.batch_size")
    with ctx.programs.counting():
      model_cfg, graphdef, params, self.base_path = resolve_base(
          cfg.base, cfg.progress, mesh=ctx.mesh, rules=ctx.train_rules)
      if model_cfg.vocab_size < self.tokenizer.vocab_size:
        raise ValueError(f"base model vocab {model_cfg.vocab_size} < tokenizer vocab "
                         f"{self.tokenizer.vocab_size}.")
      self.actor = Actor(Base(model_cfg, graphdef, params), ctx,
                         ActorConfig.from_train(cfg, self.tokenizer.pad_id))
      source_cfg = SourceConfig.from_train(cfg)
      self.rollout = make_rollout_source(
          source_cfg, ctx, SampledModel(model_cfg, graphdef, self.actor.sample_shardings),
          self.actor.policy_params, env_pool)
      self.rollout.set_weights(self.actor.sampling_weights())
    sampling, greedy = source_cfg.modes
    self.evaluator = Evaluator(cfg.eval, cfg.domains.ids, cfg.seed, batch_size=ro.batch_size,
                               modes=(greedy, sampling), prompt_format=self.rollout.prompt_format)
    self.step, self._window_start = 0, None  # the window of the idle-fraction measure
    self.log = RunLog(workdir, cfg.domains.ids, is_primary())
    # The reference is saved as a pointer (path + fingerprint), not weights.
    self.base_fingerprint = model_fingerprint(self.base_path)
    ck = cfg.checkpoint
    self.checkpointer = None
    if ck.every:
      self.checkpointer = RunCheckpointer(
          os.path.join(workdir, "checkpoints"), keep=ck.keep,
          best_metric=ck.best_metric if ck.keep_best else None, best_mode=ck.best_mode,
          async_save=ck.async_save)

  def train_step(self) -> dict:
    """One full RL step (rollout, reference/value passes, updates). Returns its metrics."""
    start = time.perf_counter()
    window_start = self._window_start or start
    step = self.step + 1
    with self.ctx.programs.counting():  # the run's eager compiles count as its own
      batch, rollout_metrics = self.rollout.next_batch(step)
      metrics = self.actor.update(batch, step)
      self.log.log_tasks(step, batch.records, self.cfg.rollout.group_size)
      t = time.perf_counter()
      metrics |= self.rollout.publish(step, self.actor.sampling_weights())
    self.step, end = step, time.perf_counter()
    metrics["time/publish"] = end - t
    metrics |= rollout_metrics
    metrics["time/step"] = end - start
    metrics["accelerator/idle_fraction"] = self.ctx.busy.idle_fraction(window_start, end)
    metrics |= host_metrics(self.ctx.programs)
    self._window_start = end
    return metrics

  def evaluate(self, domains: Sequence[str] | None = None) -> dict:
    """Held-out success per domain at the current step (`rlpt.evaluation.Evaluator.run`);
    ``domains``: a subset (default every domain)."""
    return self.evaluator.run(self.rollout.play, self.step, domains)

  def answers(self, tasks: Sequence[Task], sampled: bool = False) -> list[dict]:
    """The current policy's answers to ``tasks`` with their verdicts
    (`rlpt.evaluation.Evaluator.answers`)."""
    return self.evaluator.answers(self.rollout.play, tasks, self.step, sampled)

  def run(self) -> dict:
    """Trains for ``cfg.steps`` steps; writes metrics, the curve PNG and the table.

    Resumes from the latest checkpoint in ``workdir/checkpoints`` if there is
    one (metrics.jsonl is cut back to that step, so the file ends up as an
    uninterrupted run's); checkpoints every ``checkpoint.every`` steps and
    after the last; exports the final policy to ``workdir/export``.
    """
    cfg, ck = self.cfg, self.cfg.checkpoint
    resumed = self.restore() if self.step == 0 else None
    if resumed is not None or self.step == 0:
      self.log.rewind(self.step if resumed is not None else -1)
    if resumed is None:
      self.log.log(0, "eval", self.evaluate())
    bar = progress_bar(cfg.steps, "rl", cfg.progress)
    if bar is not None and self.step:
      bar.update(self.step)
    try:
      while self.step < cfg.steps:
        metrics = self.train_step()
        if self.step % cfg.log_every == 0:
          self.log.log(self.step, "train", metrics)
        if bar is not None:
          bar.update(1)
          bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                          tok_s=f"{metrics['throughput/generated_tokens_per_s']:.0f}")
        ev = {}
        if self.evaluator.due(self.step, cfg.steps):
          ev = self.evaluate(self.evaluator.domains_at(self.step, cfg.steps))
          self.log.log(self.step, "eval", ev)
          if bar is not None:
            sampled = (f", sampled pass@1 {ev['sampled_success/mean']:.3f}"
                       if "sampled_success/mean" in ev else "")
            masked = sum(v for k, v in ev.items() if k.endswith(f"{MASKED}/total"))
            masked = f" ({masked:.0f} held-out samples masked as infrastructure errors)" if masked else ""
            bar.write(f"step {self.step}: held-out success {ev['success/mean']:.3f}{sampled}{masked}")
        # After the step's evaluation: the checkpoint holds its eval row, and
        # the best checkpoint is ranked by held-out metrics.
        if self.checkpointer is not None and (self.step % ck.every == 0
                                              or self.step == cfg.steps):
          self.save_checkpoint(ev)
        if self.checkpointer is not None:
          self.log.log_saves(self.checkpointer.finished())
    finally:
      if bar is not None:
        bar.close()
      if self.checkpointer is not None:
        self.checkpointer.wait()
        self.log.log_saves(self.checkpointer.finished())
    if ck.export:
      self.export(os.path.join(self.workdir, "export"))
    return self.log.report(self.step)

  # --------------------------------------------------------------------------
  # Checkpoints.

  def state_dict(self) -> dict:
    """Everything besides the arrays that the next step depends on, as JSON:
    the rollout source's (task iterator, curriculum; `AsyncRolloutSource`
    says what it saves while producers run ahead), the actor's (KL
    controller), the run log's report state and the reference pointer. The minibatch order
    and every random key are functions of seed and step (rlpt.keys), so they
    have no state; the environments are reset every rollout, so neither do they.
    """
    return jsonable({
        "step": self.step, "keys": KEY_SCHEME, **self.rollout.state_dict(),
        **self.actor.state_dict(), "log": self.log.state_dict(),
        "reference": {"path": os.path.abspath(self.base_path),
                      "fingerprint": self.base_fingerprint}})

  def save_checkpoint(self, eval_metrics: dict | None = None) -> float:
    """Saves the current step (asynchronously with checkpoint.async_save).

    ``eval_metrics``: this step's evaluation (if any), which ranks the best
    checkpoint by ``checkpoint.best_metric``. Returns the seconds the loop
    was blocked.
    """
    if self.checkpointer is None:
      raise ValueError("checkpoint.every=0: this run has no checkpoints.")
    return self.checkpointer.save(self.step, self.actor.arrays(), self.state_dict(),
                                  json.loads(to_json(self.cfg)), eval_metrics)

  def restore(self, step: int | None = None) -> int | None:
    """Loads checkpoint ``step`` (default: the latest readable one) onto this
    trainer's mesh; returns the restored step, or None if there is none.

    The arrays are read straight into this trainer's shardings, so a run
    saved on one mesh shape resumes on another.
    """
    if self.checkpointer is None:
      return None
    restored = self.checkpointer.restore(abstract_like(self.actor.arrays()), step)
    if restored is None:
      return None
    t = restored.trainer
    check_resume(restored, self.checkpointer.directory, base_path=self.base_path,
                 fingerprint=self.base_fingerprint, config=json.loads(to_json(self.cfg)),
                 keys=KEY_SCHEME)
    self.actor.load_arrays(restored.arrays)
    self.actor.load_state_dict(t)
    self.rollout.set_weights(self.actor.sampling_weights())
    self.rollout.load_state_dict(t, restored.step)
    if "log" in t:
      self.log.load_state_dict(t["log"])
    else:  # saved before the report state: the rows themselves
      self.log.load_history(t["history"])
    self.step = restored.step
    log.info("Resumed from checkpoint step %d in %s.", self.step, self.checkpointer.directory)
    return self.step

  def export(self, directory: str) -> None:
    """The current policy, rlpt's and Hugging Face's format (`Actor.export`)."""
    info = {"step": self.step, "base": os.path.abspath(self.base_path),
            "train_config": json.loads(to_json(self.cfg))}
    # A Hugging Face base (imported, or warmed up by base.experiment) lends
    # its tokenizer files; the others write their tokenizer's.
    hf_base = os.path.exists(os.path.join(self.base_path, "config.json"))
    self.actor.export(directory, info, self.tokenizer, self.base_path if hf_base else "")

  def close(self):
    self.rollout.close()
    if self.checkpointer is not None:
      self.checkpointer.close()
    self.log.close()


def train(cfg: TrainConfig, workdir: str, max_programs: int = MAX_PROGRAMS) -> dict:
  """Runs ``cfg`` in ``workdir`` (`Trainer.run`); ``max_programs``: as `Trainer`."""
  trainer = Trainer(cfg, workdir, max_programs=max_programs)
  try:
    return trainer.run()
  finally:
    trainer.close()
