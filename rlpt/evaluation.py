"""Held-out evaluation: a fixed task set, its own random keys, per-domain success.

    evaluator = Evaluator(cfg.eval, cfg.domains.ids, cfg.seed, batch_size=128,
                          greedy=greedy_params, sampled=rollout_params, tokenizer=tok)
    if evaluator.due(step, last_step):
      metrics = evaluator.run(play, step)

``play(tasks, sampling, key) -> EpisodeBatch`` plays one episode per task with
the current policy (`RolloutSource.play`: its `EpisodeRunner` over its
sampler); the evaluator pads every call to ``batch_size`` tasks so it reuses
the compiled shape. Its keys are ``run_key(seed, "eval", step, mode, chunk)`` (mode 0
greedy, 1 sampled) and ``run_key(seed, "answers", step, sampled, chunk)``:
apart from the training stream, so how often a run evaluates does not change
what it trains on.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence

import numpy as np

from rlpt.config import EvalConfig
from rlpt.data import Task, eval_tasks
from rlpt.keys import run_key
from rlpt.sampling import SamplingParams

Play = Callable[[list, SamplingParams, object], object]


class Evaluator:
  """Held-out success of the policy on a fixed set of tasks (the same at every
  evaluation of a run: ``eval.tasks_per_domain`` per domain from each domain's
  eval split, drawn by ``eval.seed``, so runs of every training seed are
  measured on the same tasks)."""

  def __init__(self, cfg: EvalConfig, domains: Sequence[str], seed: int, *, batch_size: int,
               greedy: SamplingParams, sampled: SamplingParams, tokenizer):
    self.cfg, self.domains, self.seed = cfg, tuple(domains), seed
    self.batch_size, self.greedy, self.sampled = batch_size, greedy, sampled
    self.tokenizer = tokenizer
    self.tasks = eval_tasks(self.domains, cfg.tasks_per_domain, seed=cfg.seed)

  def due(self, step: int, last_step: int) -> bool:
    """Every ``eval.every`` steps and after the last."""
    return step % self.cfg.every == 0 or step == last_step

  def run(self, play: Play, step: int) -> dict:
    """``success/<domain>`` decodes with ``eval.temperature`` (0 = greedy);
    with ``eval.sampled`` also ``sampled_success/<domain>``: pass@1 of the
    policy as trained, sampling with the rollout's temperature / top-k / top-p.
    Each has a ``/mean`` over domains; samples the environments could not grade
    (infrastructure failures) do not count."""
    out = self._success(play, step, "success", self.greedy, 0)
    if self.cfg.sampled:
      out.update(self._success(play, step, "sampled_success", self.sampled, 1))
    return out

  def answers(self, play: Play, tasks: Sequence[Task], step: int, sampled: bool = False) -> list[dict]:
    """Plays each task once and returns, per task, its domain, prompt, the
    model's answer (every turn of a multi-turn episode, joined) and the
    environment's verdict and reward; greedy (as ``success/``) or sampled."""
    out = []
    stop = {self.tokenizer.pad_id, self.tokenizer.eos_id}
    sampling = self.sampled if sampled else self.greedy
    for chunk, (part, batch) in enumerate(self._play_chunks(play, tasks, sampling, "answers", step,
                                                            int(sampled))):
      for i, (task, graded) in enumerate(zip(part, batch.final)):
        tokens, mask = batch.seq.tokens[i], batch.seq.loss_mask[i]
        first = int(np.argmax(mask > 0)) + 1 if mask.any() else len(tokens)
        answer = [int(t) for t, m in zip(tokens[1:], mask) if m > 0 and int(t) not in stop]
        prompt = [int(t) for t in tokens[1:first] if int(t) not in stop]
        out.append({"domain": task.domain, "prompt": self.tokenizer.decode(prompt),
                    "answer": self.tokenizer.decode(answer), "verdict": graded.verdict,
                    "reward": float(graded.reward)})
    return out

  def _play_chunks(self, play: Play, tasks: Sequence[Task], sampling: SamplingParams,
                   purpose: str, step: int, mode: int):
    """(tasks, EpisodeBatch) per chunk of ``batch_size``; the last chunk is
    padded with repeats so every call has the compiled shape."""
    tasks = list(tasks)
    for start in range(0, len(tasks), self.batch_size):
      part = tasks[start:start + self.batch_size]
      padded = part + [part[-1]] * (self.batch_size - len(part))
      key = run_key(self.seed, purpose, step, mode, start // self.batch_size)
      yield part, play(padded, sampling, key)

  def _success(self, play: Play, step: int, prefix: str, sampling: SamplingParams, mode: int) -> dict:
    successes: dict[str, list[float]] = collections.defaultdict(list)
    for part, batch in self._play_chunks(play, self.tasks, sampling, "eval", step, mode):
      for task, x in zip(part, batch.final):
        if not x.infra_error:
          successes[task.domain].append(float(x.success))
    out = {f"{prefix}/{d}": float(np.mean(successes[d])) if successes[d] else float("nan")
           for d in self.domains}
    out[f"{prefix}/mean"] = float(np.nanmean([out[f"{prefix}/{d}"] for d in self.domains]))
    return out
