"""Supervised warm-up of an imported model on the domains' demonstrations, before RL.

The tiny built-in base is pre-trained on demonstrations (rlpt.pretrain); an
imported chat model (``base.hf_checkpoint``, ``base.model``) gets the same
supervised path here, on the domains' instruct demonstrations rendered in its
own chat template: exactly the ids the RL run will show it and sample
(`demonstration_batch` under the run's `PromptFormat`). Full fine-tuning, or
LoRA adapters merged into the weights at the end. The result is a Hugging Face
checkpoint directory with the base's tokenizer and template, which an RL run
starts from with ``base.hf_checkpoint=<workdir>/model``.
"""

from __future__ import annotations

import json
import logging
import os
import time

import jax
import numpy as np

from rlpt.config import EnvConfig, WarmupConfig, to_json
from rlpt.data import TaskSampler
from rlpt.device import (MAX_PROGRAMS, ProgramPool, batch_sharding, check_batch, jit_step,
                         place_params, place_train_state)
from rlpt.keys import init_key, seeded_rng
from rlpt.models.hf import save_hf_checkpoint
from rlpt.models.lora import init_lora, merge_lora
from rlpt.models.imported import load_imported
from rlpt.pretrain import demonstration_batch, supervised_steps
from rlpt.rollout import EnvPool
from rlpt.sharding import DEFAULT_RULES, make_mesh, state_shardings
from rlpt.steps import lora_sft_train_step, make_optimizer, sft_loss, sft_train_step
from rlpt.tokenizers.imported import imported_tokenizer
from rlpt.tokenizers.prompts import PromptFormat, prompt_format

log = logging.getLogger(__name__)


def warmup_format(cfg: WarmupConfig) -> PromptFormat:
  """The `PromptFormat` the warm-up trains under (the RL run's, for the same
  ``rollout.chat_template`` / ``rollout.system_prompt``)."""
  return prompt_format(imported_tokenizer(cfg.base), cfg.chat_template, cfg.system_prompt)


def warmup_pool(cfg: WarmupConfig) -> EnvPool:
  """The environments of the warm-up's domains, in its prompt style."""
  return EnvPool(cfg.domains.ids, EnvConfig(workers=2, prompt_style=cfg.prompt_style),
                 files=cfg.domains.files)


def warmup(cfg: WarmupConfig, workdir: str, progress: bool = True,
           max_programs: int = MAX_PROGRAMS) -> str:
  """Trains the imported base of ``cfg`` on demonstrations and saves it as a
  Hugging Face checkpoint at ``workdir/model`` (LoRA: adapters merged).
  Returns that path. Metrics (loss, token_accuracy per log step) go to
  ``workdir/metrics.jsonl`` as kind "warmup"."""
  cfg.check_base()
  fmt = warmup_format(cfg)
  mesh, rules = make_mesh({"data": -1}), DEFAULT_RULES
  check_batch(cfg.batch_size, mesh, rules, "batch_size")
  model_cfg, graphdef, params, base_path = load_imported(cfg.base, mesh, rules)
  if model_cfg.vocab_size < fmt.tokenizer.vocab_size:
    raise ValueError(f"the base's vocab_size {model_cfg.vocab_size} is smaller than its "
                     f"tokenizer's {fmt.tokenizer.vocab_size} ({base_path}).")
  optimizer = make_optimizer(cfg.optim, cfg.steps)
  batch_sh = (batch_sharding(mesh, rules, 2), batch_sharding(mesh, rules, 2))
  programs = ProgramPool(max_programs)
  lora_cfg = cfg.lora.lora_config() if cfg.lora.rank else None
  if lora_cfg is None:
    state, state_sh = place_train_state(params, optimizer, mesh, rules)
    step_fn = jit_step(programs, sft_train_step, state_sh, batch_sh, mesh, rules,
                       graphdef=graphdef, optimizer=optimizer)
  else:
    base_sh = state_shardings(params, mesh, rules)
    base = place_params(params, mesh, rules)
    adapters = init_lora(params, lora_cfg, jax.random.fold_in(init_key(cfg.seed), 1))
    state, state_sh = place_train_state(adapters, optimizer, mesh, rules)
    lora_step = jit_step(programs, lora_sft_train_step, state_sh, (base_sh, *batch_sh), mesh,
                         rules, graphdef=graphdef, optimizer=optimizer, lora_cfg=lora_cfg)
    step_fn = lambda state, tokens, mask: lora_step(state, base, tokens, mask)
  pool = warmup_pool(cfg)
  sampler = TaskSampler(cfg.domains.ids, cfg.domains.weights,
                        seed=seeded_rng("pretrain_tasks", cfg.seed))
  t0 = time.time()
  try:
    state = supervised_steps(state, step_fn,
                             lambda: demonstration_batch(pool, sampler.sample(cfg.batch_size), fmt, cfg.max_len),
                             cfg.steps, cfg.log_every, workdir, "warmup", progress, log_first=True)
  finally:
    pool.close()
  trained = state.params if lora_cfg is None else merge_lora(base, state.params, lora_cfg)
  path = os.path.join(workdir, "model")
  tokenizer_from = cfg.base.hf_checkpoint or None
  save_hf_checkpoint(path, jax.device_get(trained), model_cfg, dtype=cfg.export_dtype,
                     tokenizer_from=tokenizer_from,
                     tokenizer=None if tokenizer_from else fmt.tokenizer)
  with open(os.path.join(path, "rlpt_warmup.json"), "w") as f:
    json.dump({"warmup_config": json.loads(to_json(cfg)), "base": base_path,
               "seconds": time.time() - t0}, f, indent=2)
  log.info("Saved the warmed-up model to %s after %.1fs", path, time.time() - t0)
  return path


def demonstration_loss(graphdef, params, tokens: np.ndarray, mask: np.ndarray) -> float:
  """The mean cross-entropy (nats per target token) of ``params`` on a
  `demonstration_batch` (the warm-up's objective, for before/after checks)."""
  loss, _ = jax.jit(sft_loss, static_argnames="graphdef")(params, tokens, mask, graphdef=graphdef)
  return float(loss)
