"""Supervised pre-training of a tiny base model on the domains' demonstrations.

RL never starts from random weights: this makes a base that already knows the
task formats and succeeds sometimes (it is deliberately undertrained), which
is the situation RL post-training is for.
"""

from __future__ import annotations

import json
import logging
import os
import time

import jax
import numpy as np
from flax import nnx

from rlpt.checkpoint import save_model
from rlpt.config import EnvConfig, PretrainConfig, to_json
from rlpt.data import TaskSampler
from rlpt.keys import init_key, seeded_rng
from rlpt.metrics import MetricsWriter, progress_bar
from rlpt.models import Transformer
from rlpt.rollout import EnvPool
from rlpt.rollout.batch import bucket_length
from rlpt.device import MAX_PROGRAMS, ProgramPool, batch_sharding, jit_step, place_train_state
from rlpt.sharding import DEFAULT_RULES, make_mesh
from rlpt.steps import make_optimizer, sft_train_step
from rlpt.tokenizers import ByteTokenizer
from rlpt.tokenizers.prompts import PromptFormat

log = logging.getLogger(__name__)


def corrupt(text: str, rng: np.random.Generator) -> str:
  """One plausible slip of an imperfect teacher: a character replaced by another
  of the same class (digit for digit, letter for letter of the same case)."""
  if not text:
    return text
  i = int(rng.integers(len(text)))
  c = text[i]
  if c.isdigit():
    pool = "0123456789"
  elif c.islower():
    pool = "abcdefghijklmnopqrstuvwxyz"
  elif c.isupper():
    pool = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
  else:
    pool = "".join(sorted(set(text)))
  choices = [x for x in pool if x != c] or [c]
  return text[:i] + choices[int(rng.integers(len(choices)))] + text[i + 1:]


def demonstration_batch(pool: EnvPool, tasks, fmt: PromptFormat, max_len: int, bucket: int = 16,
                        noise: float = 0.0, rng: np.random.Generator | None = None):
  """[B, L] tokens of prompt + demonstration + end of turn, and the answer mask [B, L-1].

  The ids are those the policy would see and sample under ``fmt``: the
  prompt is ``fmt.prompt_ids(text)`` (bare: BOS + text; a chat template: its
  turns up to the assistant's header), then the demonstration's ids and the
  format's first stop token (bare: EOS; a chat template: its end-of-turn
  token). Only the demonstration and that stop token are targets. L is the
  longest example rounded up to a multiple of ``bucket`` (at most
  ``max_len``), so short batches do not pay for padding. With ``noise`` > 0 a
  fraction of the demonstrations carry one ``corrupt`` slip.
  """
  if noise and rng is None:
    raise ValueError(f"demonstration noise {noise} needs an rng (numpy Generator); got None.")
  tokenizer = fmt.tokenizer
  prompts = pool.reset(tasks)
  rows, starts = [], []
  for task, p in zip(tasks, prompts):
    prompt = fmt.prompt_ids(p.text)
    demo = p.info["demonstration"]
    if noise and rng.random() < noise:
      demo = corrupt(demo, rng)
    answer = tokenizer.encode(demo) + [fmt.stop_ids[0]]
    if len(prompt) + len(answer) > max_len:
      raise ValueError(f"a demonstration of '{task.domain}' needs {len(prompt) + len(answer)} "
                       f"tokens but max_len is {max_len}.")
    rows.append(prompt + answer)
    starts.append(len(prompt))
  width = bucket_length(max(len(r) for r in rows), max_len, bucket)
  tokens = np.full((len(rows), width), tokenizer.pad_id, np.int32)
  mask = np.zeros((len(rows), width - 1), np.float32)
  for i, (row, start) in enumerate(zip(rows, starts)):
    tokens[i, :len(row)] = row
    mask[i, start - 1:len(row) - 1] = 1.0  # targets are the answer and its EOS
  return tokens, mask


def supervised_steps(state, step_fn, next_batch, steps: int, log_every: int, workdir: str, kind: str,
                     progress: bool, log_first: bool = False):
  """Runs ``steps`` supervised steps, ``step_fn(state, *next_batch())``, and
  returns the state; the step's metrics (loss, token_accuracy) go to
  ``workdir/metrics.jsonl`` as ``kind`` every ``log_every`` steps and at the
  last (and the first, with ``log_first``). The one loop of pre-training and
  of an imported model's warm-up (rlpt.warmup)."""
  writer = MetricsWriter(workdir)
  bar = progress_bar(steps, kind, progress)
  try:
    for step in range(1, steps + 1):
      state, metrics = step_fn(state, *next_batch())
      if step % log_every == 0 or step == steps or (log_first and step == 1):
        metrics = jax.device_get(metrics)
        writer.write(step, kind, metrics)
        if bar is not None:
          bar.set_postfix(loss=f"{metrics['loss']:.3f}", acc=f"{metrics['token_accuracy']:.3f}")
      if bar is not None:
        bar.update(1)
  finally:
    if bar is not None:
      bar.close()
    writer.close()
  return state


def pretrain(cfg: PretrainConfig, workdir: str, progress: bool = True,
             max_programs: int = MAX_PROGRAMS) -> str:
  """Trains a base model and saves it to ``workdir/model``. Returns that path.
  ``max_programs``: the bound of its compiled programs (`ProgramPool`)."""
  tokenizer = ByteTokenizer()
  if cfg.model.vocab_size < tokenizer.vocab_size:
    raise ValueError(f"model.vocab_size={cfg.model.vocab_size} is smaller than the byte "
                     f"tokenizer's {tokenizer.vocab_size}.")
  fmt = PromptFormat(tokenizer)  # bare: BOS + prompt + demonstration + EOS
  mesh = make_mesh({"data": -1})
  rules = DEFAULT_RULES
  model = Transformer(cfg.model, nnx.Rngs(init_key(cfg.seed)))
  graphdef, params = nnx.split(model)
  optimizer = make_optimizer(cfg.optim, cfg.steps)
  state, state_sh = place_train_state(params, optimizer, mesh, rules)
  step_fn = jit_step(ProgramPool(max_programs), sft_train_step, state_sh,
                     (batch_sharding(mesh, rules, 2), batch_sharding(mesh, rules, 2)), mesh,
                     graphdef=graphdef, optimizer=optimizer)
  pool = EnvPool(cfg.domains.ids, EnvConfig(workers=2), files=cfg.domains.files)
  sampler = TaskSampler(cfg.domains.ids, cfg.domains.weights, seed=seeded_rng("pretrain_tasks", cfg.seed))
  noise_rng = seeded_rng("pretrain_noise", cfg.seed)
  t0 = time.time()
  try:
    state = supervised_steps(
        state, step_fn, lambda: demonstration_batch(pool, sampler.sample(cfg.batch_size), fmt, cfg.max_len,
                                                    noise=cfg.demo_noise, rng=noise_rng),
        cfg.steps, cfg.log_every, workdir, "pretrain", progress)
  finally:
    pool.close()
  path = os.path.join(workdir, "model")
  save_model(path, jax.device_get(state.params), cfg.model,
             {"pretrain_config": json.loads(to_json(cfg)), "seconds": time.time() - t0})
  log.info("Saved base model to %s after %.1fs", path, time.time() - t0)
  return path
