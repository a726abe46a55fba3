"""The single-controller RL loop.

Every step::

    task sampler -> environments reset (prompts) -> sampler on device
      -> environments step (rewards) -> reference pass -> advantages
      -> jitted, sharded train step -> metrics

Every ``eval.every`` steps the policy decodes a fixed held-out task set per
domain and the success rate of each domain is logged. ``Trainer`` is a plain
object so a notebook can drive it step by step; ``launch/train.py`` is a thin
absl wrapper around ``Trainer(cfg, workdir).run()``.
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from rlpt.config import TrainConfig, to_json
from rlpt.data import TaskSampler, eval_tasks
from rlpt.metrics import MetricsWriter, plot_eval_curves, success_table
from rlpt.pretrain import _progress, resolve_base
from rlpt.rl import ADVANTAGE_ESTIMATORS, lookup
from rlpt.rollout import EnvPool, build_sequences, encode_prompts
from rlpt.runtime import batch_multiple, batch_sharding, jit_step, place_train_state, replicated
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sharding import DEFAULT_RULES, make_mesh, state_shardings
from rlpt.steps import RLBatch, make_optimizer, rl_train_step, sequence_logprobs
from rlpt.tokenizers import ByteTokenizer

log = logging.getLogger(__name__)

# Prompt buffers are padded to a multiple of this many tokens (see bucket_length).
PROMPT_BUCKET = 16


class Trainer:
  """Owns the policy, the frozen reference, the environments and the metrics of one run."""

  def __init__(self, cfg: TrainConfig, workdir: str):
    self.cfg = cfg
    self.workdir = workdir
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w") as f:
      f.write(to_json(cfg))
    self.tokenizer = ByteTokenizer()
    self.mesh = make_mesh(cfg.mesh.as_dict())
    self.rules = DEFAULT_RULES
    multiple = batch_multiple(self.mesh, self.rules)
    if cfg.rollout.batch_size % multiple:
      raise ValueError(f"rollout.batch_size={cfg.rollout.batch_size} must be a multiple of the "
                       f"{multiple} batch shards of mesh {dict(self.mesh.shape)}.")
    self._check_domains()

    self.model_cfg, self.graphdef, params, self.base_path = resolve_base(cfg.base, cfg.progress)
    if self.model_cfg.vocab_size < self.tokenizer.vocab_size:
      raise ValueError(f"base model vocab {self.model_cfg.vocab_size} < tokenizer vocab "
                       f"{self.tokenizer.vocab_size}.")
    self.optimizer = make_optimizer(cfg.optim, cfg.steps)
    self.state, state_sh = place_train_state(params, self.optimizer, self.mesh, self.rules)
    # The reference is a frozen copy of the base: same layout, no optimizer state.
    self.ref_params = jax.device_put(params, state_shardings(params, self.mesh, self.rules))

    self.sampling = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_k, cfg.rollout.top_p)
    self.eval_sampling = SamplingParams(cfg.eval.temperature, cfg.rollout.top_k, cfg.rollout.top_p)
    self.sampler = Sampler(self.graphdef, self.model_cfg, cfg.rollout.max_prompt_len,
                           cfg.rollout.max_new_tokens, self.tokenizer.pad_id,
                           (self.tokenizer.eos_id,))
    loss_cfg = cfg.loss_config()
    bs2 = batch_sharding(self.mesh, self.rules, 2)
    bs1 = batch_sharding(self.mesh, self.rules, 1)
    batch_sh = RLBatch(bs2, bs2, bs2, bs2, bs1)
    self._train_step = jit_step(rl_train_step, state_sh, (batch_sh, replicated(self.mesh)),
                                self.mesh, graphdef=self.graphdef, optimizer=self.optimizer,
                                loss_cfg=loss_cfg, sampling=self.sampling)
    self._logprobs = jax.jit(
        functools.partial(sequence_logprobs, self.graphdef, sampling=self.sampling),
        in_shardings=(state_sh.params, bs2), out_shardings=bs2)
    self._advantages = lookup(ADVANTAGE_ESTIMATORS, cfg.rl.advantage)

    self.pool = EnvPool(cfg.domains.ids, workers=cfg.rollout.env_workers)
    self.task_sampler = TaskSampler(cfg.domains.ids, cfg.domains.weights, seed=cfg.seed)
    self.eval_set = eval_tasks(cfg.domains.ids, cfg.eval.tasks_per_domain, seed=cfg.seed + 1)
    self.rng = jax.random.key(cfg.seed)
    self.step = 0
    self.writer = MetricsWriter(workdir)
    self.history: dict[str, list[dict]] = {"train": [], "eval": []}

  def _check_domains(self):
    from environments import registry
    for d in self.cfg.domains.ids:
      spec = registry.get(d)
      if spec.max_prompt_chars + 1 > self.cfg.rollout.max_prompt_len:
        raise ValueError(f"domain '{d}' has prompts up to {spec.max_prompt_chars} chars; "
                         f"rollout.max_prompt_len={self.cfg.rollout.max_prompt_len} must be at least "
                         f"{spec.max_prompt_chars + 1} (BOS included).")

  # --------------------------------------------------------------------------
  # Rollout.

  def _generate(self, prompts: list[str], domains: list[str], sampling: SamplingParams):
    ids, lengths = encode_prompts(prompts, self.tokenizer, self.cfg.rollout.max_prompt_len,
                                  domains, bucket=PROMPT_BUCKET)
    self.rng, sub = jax.random.split(self.rng)
    bs2 = batch_sharding(self.mesh, self.rules, 2)
    bs1 = batch_sharding(self.mesh, self.rules, 1)
    out = self.sampler.generate(self.state.params, jax.device_put(ids, bs2),
                                jax.device_put(lengths, bs1), sub, sampling)
    tokens, logp, out_len = jax.device_get(out)
    texts = []
    for row, n in zip(tokens, out_len):
      body = row[:n]
      if n and body[-1] in self.sampler.stop_ids:
        body = body[:-1]
      texts.append(self.tokenizer.decode(body))
    return ids, lengths, tokens, logp, out_len, texts

  def rollout(self):
    """Samples one RL batch. Returns (RLBatch on host, per-sample records, timings)."""
    cfg = self.cfg.rollout
    g = cfg.group_size
    timings = {}
    t = time.perf_counter()
    tasks = self.task_sampler.sample(cfg.prompts_per_step)
    prompts = self.pool.reset(tasks)
    tasks_b = [task for task in tasks for _ in range(g)]
    texts_b = [p.text for p in prompts for _ in range(g)]
    timings["time/reset"] = time.perf_counter() - t

    t = time.perf_counter()
    ids, lengths, comp, logp, comp_len, answers = self._generate(
        texts_b, [tk.domain for tk in tasks_b], self.sampling)
    timings["time/generate"] = time.perf_counter() - t

    t = time.perf_counter()
    graded = self.pool.grade(tasks_b, answers)
    timings["time/environments"] = time.perf_counter() - t

    rewards = np.array([x.reward for x in graded], np.float32)
    valid = np.array([not x.infra_error for x in graded], np.float32)
    adv = np.asarray(self._advantages(jnp.asarray(rewards), g, jnp.asarray(valid)))
    seq = build_sequences(ids, lengths, comp, comp_len, logp, self.tokenizer.pad_id)
    loss_mask = seq.loss_mask * valid[:, None]
    batch = RLBatch(seq.tokens, loss_mask, seq.logp, np.zeros_like(seq.logp), adv.astype(np.float32))
    records = [dict(domain=tk.domain, reward=float(x.reward), success=x.success,
                    verdict=x.verdict, infra_error=x.infra_error, length=int(n))
               for tk, x, n in zip(tasks_b, graded, comp_len)]
    return batch, records, timings

  # --------------------------------------------------------------------------
  # Update.

  def train_step(self) -> dict:
    """One full RL step (rollout, reference pass, update). Returns its metrics."""
    t_step = time.perf_counter()
    batch, records, timings = self.rollout()
    bs2 = batch_sharding(self.mesh, self.rules, 2)
    t = time.perf_counter()
    ref_logp = self._logprobs(self.ref_params, jax.device_put(batch.tokens, bs2))
    ref_logp.block_until_ready()
    timings["time/reference"] = time.perf_counter() - t
    batch = batch._replace(ref_logp=ref_logp)

    t = time.perf_counter()
    num_tokens = jnp.asarray(max(float(batch.loss_mask.sum()), 1.0), jnp.float32)
    mb = self.cfg.rl.minibatches
    size = self.cfg.rollout.batch_size // mb
    order_rng = np.random.default_rng(self.cfg.seed * 7919 + self.step)
    metric_sums: dict[str, float] = collections.defaultdict(float)
    n_updates = 0
    for _ in range(self.cfg.rl.ppo_epochs):
      perm = order_rng.permutation(self.cfg.rollout.batch_size) if mb > 1 else np.arange(size)
      for k in range(mb):
        idx = perm[k * size:(k + 1) * size]
        # Each minibatch's loss is normalised by the whole batch's token count,
        # so one epoch's gradients add up to the full-batch objective.
        mini = RLBatch(*(np.asarray(x)[idx] for x in batch))
        self.state, m = self._train_step(self.state, mini, num_tokens * (1.0 / mb))
        for key, v in jax.device_get(m).items():
          metric_sums[key] += float(v)
        n_updates += 1
    jax.block_until_ready(self.state.params)
    timings["time/update"] = time.perf_counter() - t
    timings["time/step"] = time.perf_counter() - t_step
    self.step += 1

    metrics = {f"train/{k}": v / n_updates for k, v in metric_sums.items()}
    metrics.update(timings)
    metrics.update(_rollout_metrics(records))
    gen_tokens = sum(r["length"] for r in records)
    metrics["throughput/generated_tokens_per_s"] = gen_tokens / max(timings["time/generate"], 1e-9)
    return metrics

  # --------------------------------------------------------------------------
  # Evaluation.

  def evaluate(self) -> dict:
    """Held-out success per domain with ``eval.temperature`` decoding."""
    chunk = self.cfg.rollout.batch_size
    tasks = list(self.eval_set)
    successes: dict[str, list[float]] = collections.defaultdict(list)
    for start in range(0, len(tasks), chunk):
      part = tasks[start:start + chunk]
      # Pad the last chunk with repeats so every call has the compiled shape.
      padded = part + [part[-1]] * (chunk - len(part))
      prompts = self.pool.reset(padded)
      *_, answers = self._generate([p.text for p in prompts], [t.domain for t in padded],
                                   self.eval_sampling)
      graded = self.pool.grade(part, answers[:len(part)])
      for task, x in zip(part, graded):
        if not x.infra_error:
          successes[task.domain].append(float(x.success))
    out = {f"success/{d}": float(np.mean(successes[d])) if successes[d] else float("nan")
           for d in self.cfg.domains.ids}
    out["success/mean"] = float(np.nanmean([out[f"success/{d}"] for d in self.cfg.domains.ids]))
    return out

  # --------------------------------------------------------------------------
  # The loop.

  def run(self) -> dict:
    """Trains for ``cfg.steps`` steps; writes metrics, the curve PNG and the table."""
    cfg = self.cfg
    base = self.evaluate()
    self._log(0, "eval", base)
    bar = _progress(cfg.steps, "rl", cfg.progress)
    try:
      while self.step < cfg.steps:
        metrics = self.train_step()
        if self.step % cfg.log_every == 0:
          self._log(self.step, "train", metrics)
        if bar is not None:
          bar.update(1)
          bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                          tok_s=f"{metrics['throughput/generated_tokens_per_s']:.0f}")
        if self.step % cfg.eval.every == 0 or self.step == cfg.steps:
          ev = self.evaluate()
          self._log(self.step, "eval", ev)
          if bar is not None:
            bar.write(f"step {self.step}: held-out success {ev['success/mean']:.3f}")
    finally:
      if bar is not None:
        bar.close()
    final = self.history["eval"][-1]
    return self._report(base, final)

  def _log(self, step: int, kind: str, metrics: dict):
    self.writer.write(step, kind, metrics)
    self.history[kind].append({"step": step, **metrics})

  def _report(self, base: dict, final: dict) -> dict:
    plot_eval_curves(self.history["eval"], self.cfg.domains.ids,
                     os.path.join(self.workdir, "eval_success.png"))
    table = success_table(base, final, self.cfg.domains.ids)
    with open(os.path.join(self.workdir, "summary.md"), "w") as f:
      f.write(f"# Held-out success: base vs after {self.step} RL steps\n\n{table}\n")
    return {"base": base, "final": final, "table": table}

  def close(self):
    self.pool.close()
    self.writer.close()


def _rollout_metrics(records: list[dict]) -> dict:
  out = {}
  by_domain: dict[str, list[dict]] = collections.defaultdict(list)
  for r in records:
    by_domain[r["domain"]].append(r)
  out["reward/mean"] = float(np.mean([r["reward"] for r in records]))
  out["success/mean"] = float(np.mean([r["success"] for r in records]))
  out["response_length/mean"] = float(np.mean([r["length"] for r in records]))
  out["infra_errors"] = float(sum(r["infra_error"] for r in records))
  for d, rs in by_domain.items():
    out[f"reward/{d}"] = float(np.mean([r["reward"] for r in rs]))
    out[f"share/{d}"] = len(rs) / len(records)
  return out


def train(cfg: TrainConfig, workdir: str) -> dict:
  trainer = Trainer(cfg, workdir)
  try:
    return trainer.run()
  finally:
    trainer.close()
