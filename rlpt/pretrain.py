"""Supervised pre-training of a tiny base model on the domains' demonstrations.

RL never starts from random weights: this makes a base that already knows the
task formats and succeeds sometimes (it is deliberately undertrained), which
is the situation RL post-training is for.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import importlib.util
import json
import logging
import os
import time

import jax
import numpy as np
from flax import nnx

from rlpt.checkpoint import load_model, save_model
from rlpt.config import EnvConfig, PretrainConfig, WarmupConfig, from_config_dict, to_json
from rlpt.data import TaskSampler
from rlpt.keys import init_key, seeded_rng
from rlpt.metrics import MetricsWriter, progress_bar
from rlpt.models import Transformer
from rlpt.models.hf import load_hf_checkpoint
from rlpt.models.gguf import load_gguf_checkpoint, resolve_gguf
from rlpt.rollout import EnvPool
from rlpt.rollout.batch import bucket_length
from rlpt.device import MAX_PROGRAMS, ProgramPool, batch_sharding, jit_step, place_train_state
from rlpt.sharding import DEFAULT_RULES, make_mesh
from rlpt.steps import make_optimizer, sft_train_step
from rlpt.tokenizers import ByteTokenizer
from rlpt.tokenizers.gguf import GGUFTokenizer
from rlpt.tokenizers.hf import load_tokenizer
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


def fingerprint(cfg) -> str:
  """12 hex digits of a config dataclass's JSON: the name of what it builds."""
  return hashlib.sha256(to_json(cfg).encode()).hexdigest()[:12]


def load_experiment_config(path: str, arg: str = ""):
  """``get_config(arg)`` of the config file at ``path`` (relative paths from the
  current directory), loaded by path as ``--config`` loads one: the library
  imports no experiments package."""
  return _load_experiment(path, arg)[1]


# The config files that build a base, by their RUNNER: pre-training the tiny
# built-in base, or warming an imported model up on demonstrations.
BASE_RUNNERS = ("pretrain", "warmup")


def _load_experiment(path: str, arg: str = ""):
  """(RUNNER, ``get_config(arg)``) of the config file at ``path``."""
  if not os.path.isfile(path):
    raise ValueError(f"base.experiment={path!r}: no such config file (expected a path such as "
                     f"experiments/pretrain_base.py, relative to {os.getcwd()}).")
  spec = importlib.util.spec_from_file_location(f"rlpt_config_{experiment_name(path)}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return getattr(module, "RUNNER", "pretrain"), module.get_config(arg) if arg else module.get_config()


@dataclasses.dataclass(frozen=True)
class BuiltBase:
  """A base the run builds and caches: ``runner`` ("pretrain" or "warmup"),
  its typed ``config`` (PretrainConfig / WarmupConfig), the cache ``workdir``
  (named by the config file and the config's fingerprint) and the ``path`` of
  the model inside it (an rlpt checkpoint, or a warm-up's Hugging Face one)."""
  runner: str
  config: object
  workdir: str
  path: str


def built_base(base_cfg) -> BuiltBase:
  """The `BuiltBase` of a BaseModelConfig that names no checkpoint or model."""
  runner, cfg = _load_experiment(base_cfg.experiment, base_cfg.arg)
  if runner == "pretrain":
    typed = from_config_dict(PretrainConfig, cfg)
  elif runner == "warmup":
    typed = from_config_dict(WarmupConfig, cfg)
  else:
    raise ValueError(f"base.experiment={base_cfg.experiment!r} is a {runner!r} config; a base is built by "
                     f"one of {BASE_RUNNERS} (experiments/pretrain_base.py, experiments/warmup_hf.py).")
  name = experiment_name(base_cfg.experiment) + (f"-{base_cfg.arg}" if base_cfg.arg else "")
  workdir = os.path.join(base_cfg.cache_dir, f"{name}-{fingerprint(typed)}")
  return BuiltBase(runner, typed, workdir, os.path.join(workdir, "model"))


def imported_base(base_cfg) -> bool:
  """Whether the base is an imported model with its own tokenizer (a Hugging
  Face or GGUF checkpoint, or one warmed up from such by base.experiment);
  False for the built-in byte-level bases."""
  if base_cfg.hf_checkpoint or base_cfg.model:
    return True
  if base_cfg.checkpoint or not base_cfg.experiment:
    return False
  return built_base(base_cfg).runner == "warmup"


def experiment_name(path: str) -> str:
  """The name a base built by the config file ``path`` is cached under (its stem)."""
  return os.path.splitext(os.path.basename(path))[0]


def resolve_base(base_cfg, progress: bool = True, mesh=None, rules=DEFAULT_RULES):
  """Loads the base policy named by a BaseModelConfig, building and caching it if needed.

  Returns (model config, graphdef, params, checkpoint path). A Hugging Face
  ``hf_checkpoint`` is read with rlpt.models.hf.load_hf_checkpoint: with
  ``mesh`` straight into the ``rules`` layout (each device reads its own
  shards), else onto this process's first device like the other bases.
  """
  if base_cfg.hf_checkpoint:
    model_cfg, graphdef, params = load_hf_checkpoint(base_cfg.hf_checkpoint, mesh, rules)
    return (*_with_attention(base_cfg, model_cfg, graphdef), params, base_cfg.hf_checkpoint)
  if base_cfg.model:
    model_cfg, graphdef, params = load_gguf_checkpoint(base_cfg.model, mesh, rules)
    return (*_with_attention(base_cfg, model_cfg, graphdef), params, resolve_gguf(base_cfg.model))
  if base_cfg.checkpoint:
    path = base_cfg.checkpoint
  else:
    built = built_base(base_cfg)
    path = built.path
    _build_cached_base(built, base_cfg, progress)
    if built.runner == "warmup":  # a Hugging Face checkpoint
      model_cfg, graphdef, params = load_hf_checkpoint(path, mesh, rules)
      return (*_with_attention(base_cfg, model_cfg, graphdef), params, path)
  # Every process reads the whole (small, host-side) base onto its own first
  # device; the trainer then lays it out on the global mesh. Without a target
  # sharding orbax refuses a checkpoint saved under another process topology.
  local = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  model_cfg, graphdef, params, _ = load_model(
      path, shardings=lambda abstract: jax.tree.map(lambda _: local, abstract))
  return (*_with_attention(base_cfg, model_cfg, graphdef), params, path)


def _build_cached_base(built: BuiltBase, base_cfg, progress: bool):
  """Builds the cached base ``built`` (pre-training or a warm-up) unless it is
  there. Runs that share a cache on one machine (two experiments, two test
  workers) build each base once: the first holds an exclusive lock on
  ``<workdir>.lock`` while it trains, and the others wait, then read what it
  wrote."""
  marker = "model.json" if built.runner == "pretrain" else "rlpt_warmup.json"
  done = os.path.join(built.path, marker)
  if os.path.exists(done):
    return
  if jax.process_count() > 1:
    # Only process 0 may write the cache, and a half-written cache read by
    # the others would be worse than stopping: build it once, single-process.
    raise RuntimeError(
        f"No cached base model at {built.path} and this is a {jax.process_count()}-process run. "
        f"Build it first with one process: python -m launch.{built.runner} "
        f"--config={base_cfg.experiment}{':' + base_cfg.arg if base_cfg.arg else ''}"
        f" --workdir={built.workdir}")
  os.makedirs(os.path.dirname(built.workdir) or ".", exist_ok=True)
  with open(built.workdir + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if os.path.exists(done):
      return  # another run built it while this one waited
    if built.runner == "pretrain":
      print(f"rlpt: no cached base model at {built.path}; pre-training it now "
            f"({built.config.steps} steps).", flush=True)
      pretrain(built.config, built.workdir, progress=progress)
    else:
      from rlpt.warmup import warmup  # rlpt.warmup builds on this module
      print(f"rlpt: no cached warm-up at {built.path}; warming the model up now "
            f"({built.config.steps} steps).", flush=True)
      warmup(built.config, built.workdir, progress=progress)


def _with_attention(base_cfg, model_cfg, graphdef):
  """The base's (config, graphdef) with the run's attention overrides applied.

  The attention implementation and block size change how the same weights
  are applied (long contexts: blockwise, sparse or ring), never the weights.
  """
  over = {}
  if base_cfg.attention_impl:
    over["attention_impl"] = base_cfg.attention_impl
  if base_cfg.attention_block_size:
    over["attention_block_size"] = base_cfg.attention_block_size
  if not over:
    return model_cfg, graphdef
  model_cfg = dataclasses.replace(model_cfg, **over)
  graphdef = nnx.graphdef(nnx.eval_shape(lambda: Transformer(model_cfg, nnx.Rngs(0))))
  return model_cfg, graphdef


def resolve_tokenizer(base_cfg):
  """The tokenizer of the base: a Hugging Face base's own (tokenizer.json or
  tokenizer.model), a GGUF file's (its metadata), else the byte tokenizer of
  the built-in bases (a base warmed up by ``base.experiment`` keeps its
  imported model's)."""
  if base_cfg.hf_checkpoint:
    return load_tokenizer(base_cfg.hf_checkpoint)
  if base_cfg.model:
    return GGUFTokenizer(base_cfg.model)
  if not base_cfg.checkpoint and base_cfg.experiment:
    built = built_base(base_cfg)
    if built.runner == "warmup":  # the warm-up keeps its base's tokenizer
      return resolve_tokenizer(built.config.base)
  return ByteTokenizer()
