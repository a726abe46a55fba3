"""Held-out evaluation: a fixed task set, its own random keys, per-domain success.

    evaluator = Evaluator(cfg.eval, cfg.domains.ids, cfg.seed, batch_size=128,
                          modes=(greedy_params, rollout_params),
                          prompt_format=PromptFormat(tok))
    if evaluator.due(step, last_step):
      metrics = evaluator.run(play, step, evaluator.domains_at(step, last_step))

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
from rlpt.curriculum.signal import domain_family
from rlpt.data import Task, eval_tasks
from rlpt.keys import run_key
from rlpt.metrics.report import MASKED
from rlpt.sampling import SamplingParams
from rlpt.tokenizers.prompts import PromptFormat

Play = Callable[[list, SamplingParams, object], object]



class Evaluator:
  """Held-out success of the policy on a fixed set of tasks (the same at every
  evaluation of a run: ``eval.tasks_per_domain`` per domain from each domain's
  eval split, drawn by ``eval.seed``, so runs of every training seed are
  measured on the same tasks)."""

  def __init__(self, cfg: EvalConfig, domains: Sequence[str], seed: int, *, batch_size: int,
               modes: tuple[SamplingParams, SamplingParams], prompt_format: PromptFormat):
    """``modes``: (the evaluation's sampling, the rollout's: ``eval.sampled``'s pass@1);
    ``prompt_format``: how the played prompts were laid out (the rollout's;
    ``PromptFormat(tokenizer)`` for bare prompts), so ``answers`` shows their
    text without the template, decoded by its tokenizer."""
    self.cfg, self.domains, self.seed = cfg, tuple(domains), seed
    self.batch_size, (self.greedy, self.sampled) = batch_size, modes
    self.tokenizer = prompt_format.tokenizer
    self.format = prompt_format
    self.tasks = eval_tasks(self.domains, cfg.tasks_per_domain, seed=cfg.seed)

  def due(self, step: int, last_step: int) -> bool:
    """Every ``eval.every`` steps and after the last."""
    return step % self.cfg.every == 0 or step == last_step

  def domains_at(self, step: int, last_step: int) -> tuple[str, ...]:
    """The domains the evaluation at ``step`` covers: all of them before
    training, after the last step and without ``eval.domains_per_eval``;
    otherwise the next ``domains_per_eval`` in turn (a function of the step, so
    a resumed run evaluates what an uninterrupted one would)."""
    n, k = self.cfg.domains_per_eval, len(self.domains)
    if not n or n >= k or step <= 0 or step >= last_step:
      return self.domains
    first = (step // self.cfg.every - 1) * n
    return tuple(self.domains[(first + i) % k] for i in range(n))

  def run(self, play: Play, step: int, domains: Sequence[str] | None = None) -> dict:
    """``success/<domain>`` decodes with ``eval.temperature`` (0 = greedy);
    with ``eval.sampled`` also ``sampled_success/<domain>``: pass@1 of the
    policy as trained, sampling with the rollout's temperature / top-k / top-p,
    averaged over ``eval.samples`` plays of each task.
    Each has a ``/mean`` over the evaluated domains and, per family
    (``domain_family``), ``family_success/<f>`` / ``family_sampled_success/<f>``
    over its evaluated domains; samples the environments could not grade
    (infrastructure failures) do not count: ``success_masked/<domain>`` (and
    ``sampled_success_masked/``, with ``/total``) counts them. ``domains``: a subset to evaluate
    (default every domain; see ``domains_at``); ``eval/domains`` and
    ``eval/tasks`` say how many domains and tasks (per measure) it covered."""
    domains = self.domains if domains is None else tuple(domains)
    unknown = sorted(set(domains) - set(self.domains))
    if unknown:
      raise ValueError(f"cannot evaluate {unknown}: not among the run's domains.")
    chosen = set(domains)
    tasks = [t for t in self.tasks if t.domain in chosen]
    out = self._success(play, step, "success", self.greedy, 0, domains, tasks)
    if self.cfg.sampled:
      repeated = [t for t in tasks for _ in range(self.cfg.samples)]
      out.update(self._success(play, step, "sampled_success", self.sampled, 1, domains, repeated))
    out["eval/domains"] = float(len(domains))
    out["eval/tasks"] = float(len(tasks))
    if self.cfg.sampled:
      out["eval/sampled_episodes"] = float(len(tasks) * self.cfg.samples)
    return out

  def answers(self, play: Play, tasks: Sequence[Task], step: int, sampled: bool = False) -> list[dict]:
    """Plays each task once and returns, per task, its domain, prompt, the
    model's answer (every turn of a multi-turn episode, joined) and the
    environment's verdict and reward; greedy (as ``success/``) or sampled."""
    out = []
    stop = {self.tokenizer.pad_id, self.tokenizer.eos_id, *self.format.stop_ids}
    sampling = self.sampled if sampled else self.greedy
    for chunk, (part, batch) in enumerate(self._play_chunks(play, tasks, sampling, "answers", step,
                                                            int(sampled))):
      for i, (task, graded) in enumerate(zip(part, batch.final)):
        tokens, mask = batch.seq.tokens[i], batch.seq.loss_mask[i]
        first = int(np.argmax(mask > 0)) + 1 if mask.any() else len(tokens)
        answer = [int(t) for t, m in zip(tokens[1:], mask) if m > 0 and int(t) not in stop]
        prompt = [t for t in self.format.prompt_text_ids(tokens[:first]) if t not in stop]
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

  def _success(self, play: Play, step: int, prefix: str, sampling: SamplingParams, mode: int,
               domains: Sequence[str], tasks: Sequence[Task]) -> dict:
    successes: dict[str, list[float]] = collections.defaultdict(list)
    masked: dict[str, int] = collections.Counter()
    for part, batch in self._play_chunks(play, tasks, sampling, "eval", step, mode):
      for task, x in zip(part, batch.final):
        if x.infra_error:
          masked[task.domain] += 1
        else:
          successes[task.domain].append(float(x.success))
    out = {f"{prefix}/{d}": float(np.mean(successes[d])) if successes[d] else float("nan")
           for d in domains}
    # Masked samples leave the denominator: shown beside the success they
    # could have raised, so a policy that dodges its failures shows.
    out.update({f"{prefix}{MASKED}/{d}": float(masked[d]) for d in domains})
    out[f"{prefix}{MASKED}/total"] = float(sum(masked[d] for d in domains))
    out[f"{prefix}/mean"] = _nanmean([out[f"{prefix}/{d}"] for d in domains])
    families = collections.defaultdict(list)
    for d in domains:
      families[domain_family(d)].append(out[f"{prefix}/{d}"])
    for f, xs in sorted(families.items()):
      out[f"family_{prefix}/{f}"] = _nanmean(xs)
    return out


def _nanmean(xs) -> float:
  xs = [x for x in xs if not np.isnan(x)]
  return float(np.mean(xs)) if xs else float("nan")
