"""The single-controller RL loop.

Every step::

    task stream (grain) -> environments reset (prompts) -> sampler on device
      -> environments step (rewards) -> reference pass -> advantages
      -> jitted, sharded train step -> metrics

Every ``eval.every`` steps the policy decodes a fixed held-out task set per
domain and the success rate of each domain is logged. Every
``checkpoint.every`` steps the whole run state is checkpointed (weights,
optimizer, RNG, data-iterator, curriculum and KL-controller state, metrics
history); ``run`` resumes from the latest checkpoint and reproduces the steps
an uninterrupted run would have taken. ``Trainer`` is a plain
object so a notebook can drive it step by step; ``launch/train.py`` is a thin
absl wrapper around ``Trainer(cfg, workdir).run()``.
"""

from __future__ import annotations

import collections
import functools
import json
import logging
import math
import os
import time
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlpt.checkpoint import RunCheckpointer, abstract_like, model_fingerprint, save_model
from rlpt.config import TrainConfig, to_json
from rlpt.curriculum import domain_metrics
from rlpt.data import TaskStream, eval_tasks
from rlpt.metrics import MetricsWriter, plot_eval_curves, success_table
from rlpt.models import ValueModel
from rlpt.models.lora import init_lora, lora_rl_train_step, merge_lora, save_adapters
from rlpt.pretrain import _progress, resolve_base, resolve_tokenizer
from rlpt.rl import (AdvantageInputs, compute_advantages, fill_groups, groups_with_signal,
                     kl_reward_penalty_BxT, loss_counts, make_kl_controller, overlong_filter_BxT,
                     sequence_kl_B, soft_overlong_penalty_B, truncated_B)
from rlpt.rollout import EnvPool, build_sequences, encode_prompts
from rlpt.runtime import (batch_sharding, check_batch, host_to_global, is_primary, jit_sampler,
                          jit_step, make_reshard, place_params, place_train_state, replicated,
                          to_device, to_host)
from rlpt.sampling import Sampler, SamplingParams
from rlpt.sharding import make_mesh, state_shardings
from rlpt.steps import (Counts, RLBatch, ValueBatch, make_optimizer, rl_train_step,
                        sequence_logprobs, sequence_values, value_train_step)

log = logging.getLogger(__name__)

# Prompt buffers are padded to a multiple of this many tokens (see bucket_length).
PROMPT_BUCKET = 16


class Trainer:
  """Owns the policy, the frozen reference, the environments and the metrics of one run."""

  def __init__(self, cfg: TrainConfig, workdir: str):
    self.cfg = cfg
    self.workdir = workdir
    if is_primary():
      os.makedirs(workdir, exist_ok=True)
      with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write(to_json(cfg))
    self.tokenizer = resolve_tokenizer(cfg.base)
    self.mesh = make_mesh(cfg.mesh.as_dict())
    # Two layouts from the config's rules: training (FSDP + tensor) for the
    # update and the reference pass, sampling (tensor only) for the sampler.
    self.rules = cfg.sharding.train_rules
    self.sample_rules = cfg.sharding.sample_rules
    check_batch(cfg.rollout.batch_size, self.mesh, self.rules, "rollout.batch_size")
    check_batch(cfg.rollout.batch_size // cfg.rl.minibatches, self.mesh, self.rules,
                "rollout.batch_size / rl.minibatches")
    check_batch(cfg.rollout.batch_size, self.mesh, self.sample_rules, "rollout.batch_size")
    self._check_domains()

    self.model_cfg, self.graphdef, params, self.base_path = resolve_base(
        cfg.base, cfg.progress, mesh=self.mesh, rules=self.rules)
    if self.model_cfg.vocab_size < self.tokenizer.vocab_size:
      raise ValueError(f"base model vocab {self.model_cfg.vocab_size} < tokenizer vocab "
                       f"{self.tokenizer.vocab_size}.")
    self.optimizer = make_optimizer(cfg.optim, cfg.steps)
    # The reference is a frozen copy of the base: same layout, no optimizer
    # state; with reference_memory="pinned_host" it waits in host memory.
    self.ref_sh = state_shardings(params, self.mesh, self.rules)
    self.ref_on_host = cfg.sharding.reference_memory == "pinned_host"
    self.ref_params = place_params(params, self.mesh, self.rules,
                                   "pinned_host" if self.ref_on_host else None)
    # With LoRA the trainable state is the adapters; the base stays frozen and
    # doubles as the reference.
    self.lora_cfg = cfg.lora.lora_config() if cfg.lora.rank else None
    trainable = (params if self.lora_cfg is None else
                 init_lora(params, self.lora_cfg, jax.random.key(cfg.seed + 17)))
    self.state, state_sh = place_train_state(trainable, self.optimizer, self.mesh, self.rules)
    sample_sh = state_shardings(params, self.mesh, self.sample_rules)
    self._to_sample_layout = make_reshard(self.ref_sh, sample_sh)
    self.sample_params = self._to_sample_layout(self.policy_params())

    self.sampling = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_k, cfg.rollout.top_p)
    self.eval_sampling = SamplingParams(cfg.eval.temperature, cfg.rollout.top_k, cfg.rollout.top_p)
    self.sampler = Sampler(self.graphdef, self.model_cfg, cfg.rollout.max_prompt_len,
                           cfg.rollout.max_new_tokens, self.tokenizer.pad_id,
                           (self.tokenizer.eos_id,))
    self._generate_fns = {
        sp: jit_sampler(self.sampler, sp, sample_sh, self.mesh, self.sample_rules)
        for sp in {self.sampling, self.eval_sampling}}
    loss_cfg = cfg.loss_config()
    bs2 = batch_sharding(self.mesh, self.rules, 2)
    rep = replicated(self.mesh)
    self._batch_sh = RLBatch(bs2, bs2, bs2, bs2, bs2)
    self._counts_sh = Counts(rep, rep)
    if self.lora_cfg is None:
      self._train_step = jit_step(rl_train_step, state_sh,
                                  (self._batch_sh, self._counts_sh, rep), self.mesh,
                                  rules=self.rules, graphdef=self.graphdef,
                                  optimizer=self.optimizer, loss_cfg=loss_cfg,
                                  sampling=self.sampling)
    else:
      lora_step = jit_step(lora_rl_train_step, state_sh,
                           (self.ref_sh, self._batch_sh, self._counts_sh, rep), self.mesh,
                           rules=self.rules, graphdef=self.graphdef, optimizer=self.optimizer,
                           loss_cfg=loss_cfg, sampling=self.sampling, lora_cfg=self.lora_cfg)
      self._train_step = lambda state, *rest: lora_step(state, self.ref_params, *rest)
    self._logprobs = jax.jit(
        functools.partial(sequence_logprobs, self.graphdef, sampling=self.sampling),
        in_shardings=(self.ref_sh, bs2), out_shardings=bs2)
    self.kl_ctl = make_kl_controller(
        cfg.rl.kl_controller, cfg.rl.kl_beta,
        **({"target": cfg.rl.kl_target, "horizon": cfg.rl.kl_horizon}
           if cfg.rl.kl_controller == "adaptive" else {}))
    self.value_state = None
    if cfg.uses_value_model:
      # The critic's trunk starts from the base policy's decoder, its head at 0.
      vgraph, vparams = nnx.split(ValueModel(self.model_cfg, nnx.Rngs(cfg.seed)))
      vparams["decoder"] = params["decoder"]
      self.value_optimizer = make_optimizer(cfg.value.optim, cfg.steps)
      self.value_state, vstate_sh = place_train_state(vparams, self.value_optimizer, self.mesh,
                                                      self.rules)
      self._value_batch_sh = ValueBatch(bs2, bs2, bs2, bs2)
      self._value_step = jit_step(value_train_step, vstate_sh,
                                  (self._value_batch_sh, self._counts_sh), self.mesh,
                                  rules=self.rules, graphdef=vgraph, optimizer=self.value_optimizer,
                                  value_cfg=cfg.value_loss_config())
      self._values = jax.jit(functools.partial(sequence_values, vgraph),
                             in_shardings=(vstate_sh.params, bs2), out_shardings=bs2)

    self.pool = EnvPool(cfg.domains.ids, workers=cfg.rollout.env_workers)
    # Training tasks: a grain iterator of per-rollout seeds; the curriculum
    # sampler picks each rollout's domains (see rlpt.data.stream).
    self.task_stream = TaskStream(cfg.seed, cfg.rollout.prompts_per_step)
    self.domain_sampler = cfg.domain_sampler()
    self.eval_set = eval_tasks(cfg.domains.ids, cfg.eval.tasks_per_domain, seed=cfg.seed + 1)
    self.rng = jax.random.key(cfg.seed)
    self.step = 0
    self.writer = MetricsWriter(workdir) if is_primary() else None
    self.history: dict[str, list[dict]] = {"train": [], "eval": []}
    # The reference is saved as a pointer (path + fingerprint), not weights.
    self.base_fingerprint = model_fingerprint(self.base_path)
    ck = cfg.checkpoint
    self.checkpointer = None
    if ck.every:
      self.checkpointer = RunCheckpointer(
          os.path.join(workdir, "checkpoints"), keep=ck.keep,
          best_metric=ck.best_metric if ck.keep_best else None, best_mode=ck.best_mode,
          async_save=ck.async_save)

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
    bs2 = batch_sharding(self.mesh, self.sample_rules, 2)
    bs1 = batch_sharding(self.mesh, self.sample_rules, 1)
    out = self._generate_fns[sampling](self.sample_params, host_to_global(ids, bs2),
                                       host_to_global(lengths, bs1),
                                       host_to_global(jax.random.key_data(sub), replicated(self.mesh)))
    tokens, logp, out_len = to_host(out)
    texts = []
    for row, n in zip(tokens, out_len):
      body = row[:n]
      if n and body[-1] in self.sampler.stop_ids:
        body = body[:-1]
      texts.append(self.tokenizer.decode(body))
    return ids, lengths, tokens, logp, out_len, texts

  def _rollout_once(self, n_prompts: int):
    """Samples ``n_prompts`` x group_size completions and grades them (host arrays)."""
    g = self.cfg.rollout.group_size
    timings = collections.defaultdict(float)
    t = time.perf_counter()
    tasks = self.task_stream.next_tasks(self.domain_sampler)
    assert len(tasks) == n_prompts, (len(tasks), n_prompts)
    prompts = self.pool.reset(tasks)
    tasks_b = [task for task in tasks for _ in range(g)]
    texts_b = [p.text for p in prompts for _ in range(g)]
    timings["time/reset"] += time.perf_counter() - t

    t = time.perf_counter()
    ids, lengths, comp, logp, comp_len, answers = self._generate(
        texts_b, [tk.domain for tk in tasks_b], self.sampling)
    timings["time/generate"] += time.perf_counter() - t

    t = time.perf_counter()
    graded = self.pool.grade(tasks_b, answers)
    timings["time/environments"] += time.perf_counter() - t

    seq = build_sequences(ids, lengths, comp, comp_len, logp, self.tokenizer.pad_id)
    last = comp[np.arange(len(comp)), np.maximum(comp_len - 1, 0)]
    records = [dict(domain=tk.domain, reward=float(x.reward), success=float(x.success),
                    verdict=x.verdict, infra_error=x.infra_error, length=int(n))
               for tk, x, n in zip(tasks_b, graded, comp_len)]
    arrays = {
        "tokens": seq.tokens, "loss_mask": seq.loss_mask, "old_logp": seq.logp,
        "rewards": np.array([x.reward for x in graded], np.float32),
        "valid": np.array([not x.infra_error for x in graded], np.float32),
        "lengths": comp_len.astype(np.int32),
        "stopped": np.isin(last, self.sampler.stop_ids) & (comp_len > 0),
    }
    return arrays, records, timings

  def rollout(self):
    """One batch of graded samples as host arrays, per-sample records and timings.

    With ``rl.dynamic_sampling`` groups whose rewards are all equal (no
    learning signal) are dropped and further rollouts refill the batch, up to
    ``rl.max_rollouts_per_step``; if still short, uninformative groups fill
    the rest so the batch shape never changes.
    """
    cfg, ro = self.cfg, self.cfg.rollout
    arrays, records, timings = self._rollout_once(ro.prompts_per_step)
    if not cfg.rl.dynamic_sampling:
      return arrays, records, timings
    cands, recs = [arrays], [records]
    def informative(a):
      return int(groups_with_signal(a["rewards"].reshape(-1, ro.group_size),
                                    a["valid"].reshape(-1, ro.group_size)).sum())
    have = informative(arrays)
    while have < ro.prompts_per_step and len(cands) < cfg.rl.max_rollouts_per_step:
      more, more_rec, more_t = self._rollout_once(ro.prompts_per_step)
      cands.append(more)
      recs.append(more_rec)
      for k, v in more_t.items():
        timings[k] += v
      have += informative(more)
    # Rollouts may differ in prompt-bucket width: pad to a common one.
    width = max(c["tokens"].shape[1] for c in cands)
    offset = 0
    for c, r in zip(cands, recs):
      c.update(_pad_width(c, width, self.tokenizer.pad_id))
      c["row"] = np.arange(offset, offset + len(r))
      offset += len(r)
    flat_records = [r for rs in recs for r in rs]
    filled = fill_groups(cands, ro.prompts_per_step, ro.group_size, valid_key="valid")
    out = filled.arrays
    if not filled.complete:
      # Top up with uninformative groups (advantage 0) from the first rollout.
      need = (ro.prompts_per_step - filled.num_groups) * ro.group_size
      used = set(out["row"].tolist()) if len(out["row"]) else set()
      spare = np.array([i for i in range(len(cands[0]["rewards"])) if i not in used])[:need]
      out = {k: np.concatenate([out[k], cands[0][k][spare]]) for k in out}
    timings["dynamic_sampling/rollouts"] = float(len(cands))
    timings["dynamic_sampling/informative_groups"] = float(min(have, ro.prompts_per_step))
    return ({k: v for k, v in out.items() if k != "row"},
            [flat_records[i] for i in out["row"]], timings)

  # --------------------------------------------------------------------------
  # Update.

  def _advantages(self, arrays, ref_logp, values):
    """Advantages and value targets for a graded batch; applies reward shaping."""
    cfg, rl = self.cfg, self.cfg.rl
    mask = arrays["loss_mask"] * arrays["valid"][:, None]
    rewards = arrays["rewards"].copy()
    truncated = truncated_B(arrays["lengths"], arrays["stopped"], cfg.rollout.max_new_tokens)
    if rl.overlong_filter:
      mask = overlong_filter_BxT(mask, truncated)
    if rl.overlong_buffer:
      rewards = rewards + soft_overlong_penalty_B(arrays["lengths"], cfg.rollout.max_new_tokens,
                                                  rl.overlong_buffer, rl.overlong_penalty)
    old_logp = jnp.asarray(arrays["old_logp"])
    seq_kl = sequence_kl_B(old_logp, ref_logp, jnp.asarray(mask))
    token_rewards = None
    if rl.kl_mode == "reward":
      token_rewards = kl_reward_penalty_BxT(old_logp, ref_logp, jnp.asarray(mask),
                                            self.kl_ctl.value)
    adv = compute_advantages(rl.advantage, AdvantageInputs(
        jnp.asarray(rewards), jnp.asarray(mask), cfg.rollout.group_size,
        jnp.asarray(arrays["valid"]), values, token_rewards, rl.gamma, rl.lam,
        rl.whiten_advantages))
    return mask, adv, float(jnp.mean(seq_kl)), float(truncated.mean())

  def train_step(self) -> dict:
    """One full RL step (rollout, reference/value passes, updates). Returns its metrics."""
    cfg = self.cfg
    t_step = time.perf_counter()
    arrays, records, timings = self.rollout()
    bs2 = batch_sharding(self.mesh, self.rules, 2)
    t = time.perf_counter()
    tokens = host_to_global(arrays["tokens"], bs2)
    ref = to_device(self.ref_params, self.ref_sh) if self.ref_on_host else self.ref_params
    ref_logp = to_host(self._logprobs(ref, tokens))
    del ref
    values = None
    if self.value_state is not None:
      values = to_host(self._values(self.value_state.params, tokens))
    timings["time/reference"] = time.perf_counter() - t

    mask, adv, seq_kl, truncated = self._advantages(
        arrays, jnp.asarray(ref_logp), None if values is None else jnp.asarray(values))
    kl_coef = self.kl_ctl.value
    self.kl_ctl.update(seq_kl, n_steps=cfg.rollout.batch_size)
    batch = RLBatch(arrays["tokens"], np.asarray(mask), arrays["old_logp"], ref_logp,
                    np.asarray(adv.adv_BxT))
    vbatch = None
    if values is not None:
      vbatch = ValueBatch(arrays["tokens"], np.asarray(mask), values,
                          np.asarray(adv.returns_BxT))

    t = time.perf_counter()
    mb = cfg.rl.minibatches
    c = loss_counts(jnp.asarray(mask))
    counts = Counts(jnp.float32(c.num_tokens) / mb, jnp.float32(c.num_seqs) / mb)
    # Scalars go in as global arrays too (multi-process runs need them).
    g_counts = host_to_global(counts, self._counts_sh)
    g_kl_coef = host_to_global(np.float32(kl_coef), replicated(self.mesh))
    size = cfg.rollout.batch_size // mb
    order_rng = np.random.default_rng(cfg.seed * 7919 + self.step)
    metric_sums: dict[str, float] = collections.defaultdict(float)
    n_updates = 0
    for _ in range(cfg.rl.ppo_epochs):
      perm = order_rng.permutation(cfg.rollout.batch_size) if mb > 1 else np.arange(size)
      for k in range(mb):
        idx = perm[k * size:(k + 1) * size]
        # Each minibatch's loss is normalised by the whole batch's counts, so
        # one epoch's gradients add up to the full-batch objective.
        mini = host_to_global(RLBatch(*(x[idx] for x in batch)), self._batch_sh)
        self.state, m = self._train_step(self.state, mini, g_counts, g_kl_coef)
        if vbatch is not None:
          vmini = host_to_global(ValueBatch(*(x[idx] for x in vbatch)), self._value_batch_sh)
          self.value_state, vm = self._value_step(self.value_state, vmini, g_counts)
          m = {**m, **vm}
        for key, v in to_host(m).items():
          metric_sums[key] += float(v)
        n_updates += 1
    # The sampler reads its own (sampling-layout) copy of the new weights.
    self.sample_params = self._to_sample_layout(self.policy_params())
    jax.block_until_ready(self.sample_params)
    timings["time/update"] = time.perf_counter() - t
    timings["time/step"] = time.perf_counter() - t_step
    self.step += 1

    valid = [r for r in records if not r["infra_error"]]
    by_domain = collections.defaultdict(list)
    for r in valid:
      by_domain[r["domain"]].append(r["success"])
    self.domain_sampler.update(by_domain)

    metrics = {f"train/{k}": v / n_updates for k, v in metric_sums.items()}
    metrics.update(timings)
    metrics.update(domain_metrics(valid, self.domain_sampler, tokens_key="length"))
    metrics["reward/mean"] = float(np.mean([r["reward"] for r in valid])) if valid else 0.0
    metrics["success/mean"] = float(np.mean([r["success"] for r in valid])) if valid else 0.0
    metrics["response_length/mean"] = float(np.mean([r["length"] for r in records]))
    metrics["infra_errors"] = float(len(records) - len(valid))
    metrics["truncated_fraction"] = truncated
    metrics["kl/sequence"] = seq_kl
    metrics["kl/coef"] = kl_coef
    # CRC-32 of the trained batch's tokens: an integer (exact in float64) that
    # tells whether two runs sampled the same tokens (resume tests compare it).
    metrics["rollout/token_hash"] = float(zlib.crc32(np.ascontiguousarray(arrays["tokens"])))
    gen_tokens = sum(r["length"] for r in records)
    metrics["throughput/generated_tokens_per_s"] = gen_tokens / max(timings["time/generate"], 1e-9)
    return metrics

  # --------------------------------------------------------------------------
  # Evaluation.

  def evaluate(self) -> dict:
    """Held-out success per domain.

    ``success/<domain>`` decodes with ``eval.temperature`` (0 = greedy);
    with ``eval.sampled`` also ``sampled_success/<domain>``: pass@1 of the
    policy as trained, sampling with the rollout's temperature / top-k / top-p.
    """
    out = self._success("success", self.eval_sampling)
    if self.cfg.eval.sampled:
      out.update(self._success("sampled_success", self.sampling))
    return out

  def _success(self, prefix: str, sampling: SamplingParams) -> dict:
    chunk = self.cfg.rollout.batch_size
    tasks = list(self.eval_set)
    successes: dict[str, list[float]] = collections.defaultdict(list)
    for start in range(0, len(tasks), chunk):
      part = tasks[start:start + chunk]
      # Pad the last chunk with repeats so every call has the compiled shape.
      padded = part + [part[-1]] * (chunk - len(part))
      prompts = self.pool.reset(padded)
      *_, answers = self._generate([p.text for p in prompts], [t.domain for t in padded],
                                   sampling)
      graded = self.pool.grade(part, answers[:len(part)])
      for task, x in zip(part, graded):
        if not x.infra_error:
          successes[task.domain].append(float(x.success))
    ids = self.cfg.domains.ids
    out = {f"{prefix}/{d}": float(np.mean(successes[d])) if successes[d] else float("nan")
           for d in ids}
    out[f"{prefix}/mean"] = float(np.nanmean([out[f"{prefix}/{d}"] for d in ids]))
    return out

  # --------------------------------------------------------------------------
  # The loop.

  def run(self) -> dict:
    """Trains for ``cfg.steps`` steps; writes metrics, the curve PNG and the table.

    Resumes from the latest checkpoint in ``workdir/checkpoints`` if there is
    one (metrics.jsonl is cut back to that step, so the file ends up as an
    uninterrupted run's); checkpoints every ``checkpoint.every`` steps and
    after the last; exports the final policy to ``workdir/export``.
    """
    cfg, ck = self.cfg, self.cfg.checkpoint
    resumed = self.restore() if self.step == 0 else None
    if self.writer is not None and (resumed is not None or self.step == 0):
      self.writer.rewind(self.step if resumed is not None else -1)
    if resumed is None:
      base = self.evaluate()
      self._log(0, "eval", base)
    else:
      base = {k: v for k, v in self.history["eval"][0].items() if k != "step"}
    bar = _progress(cfg.steps, "rl", cfg.progress)
    if bar is not None and self.step:
      bar.update(self.step)
    try:
      while self.step < cfg.steps:
        metrics = self.train_step()
        if self.step % cfg.log_every == 0:
          self._log(self.step, "train", metrics)
        if bar is not None:
          bar.update(1)
          bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}",
                          tok_s=f"{metrics['throughput/generated_tokens_per_s']:.0f}")
        ev = {}
        if self.step % cfg.eval.every == 0 or self.step == cfg.steps:
          ev = self.evaluate()
          self._log(self.step, "eval", ev)
          if bar is not None:
            sampled = (f", sampled pass@1 {ev['sampled_success/mean']:.3f}"
                       if "sampled_success/mean" in ev else "")
            bar.write(f"step {self.step}: held-out success {ev['success/mean']:.3f}{sampled}")
        # After the step's evaluation: the checkpoint holds its eval row, and
        # the best checkpoint is ranked by held-out metrics.
        if self.checkpointer is not None and (self.step % ck.every == 0
                                              or self.step == cfg.steps):
          self.save_checkpoint(ev)
        self._log_save_timings()
    finally:
      if bar is not None:
        bar.close()
      if self.checkpointer is not None:
        self.checkpointer.wait()
        self._log_save_timings()
    if ck.export:
      self.export(os.path.join(self.workdir, "export"))
    final = self.history["eval"][-1]
    return self._report(base, final)

  # --------------------------------------------------------------------------
  # Checkpoints.

  def _checkpoint_arrays(self) -> dict:
    return {"policy": self.state, "value": self.value_state}

  def _trainer_state(self) -> dict:
    """Everything besides the arrays that the next step depends on, as JSON.

    The minibatch order of a step is drawn from seed and step, so it has no
    state; the environments are reset every rollout, so neither do they.
    """
    return _jsonable({
        "step": self.step,
        "rng": {"impl": str(jax.random.key_impl(self.rng)),
                "data": np.asarray(jax.random.key_data(self.rng)).tolist()},
        "tasks": self.task_stream.state_dict(),
        "curriculum": self.domain_sampler.state_dict(),
        "kl_controller": self.kl_ctl.state_dict(),
        "history": self.history,
        "reference": {"path": os.path.abspath(self.base_path),
                      "fingerprint": self.base_fingerprint},
    })

  def save_checkpoint(self, eval_metrics: dict | None = None) -> float:
    """Saves the current step (asynchronously with checkpoint.async_save).

    ``eval_metrics``: this step's evaluation (if any), which ranks the best
    checkpoint by ``checkpoint.best_metric``. Returns the seconds the loop
    was blocked.
    """
    if self.checkpointer is None:
      raise ValueError("checkpoint.every=0: this run has no checkpoints.")
    return self.checkpointer.save(self.step, self._checkpoint_arrays(), self._trainer_state(),
                                  json.loads(to_json(self.cfg)), eval_metrics)

  def restore(self, step: int | None = None) -> int | None:
    """Loads checkpoint ``step`` (default: the latest readable one) onto this
    trainer's mesh; returns the restored step, or None if there is none.

    The arrays are read straight into this trainer's shardings, so a run
    saved on one mesh shape resumes on another.
    """
    if self.checkpointer is None:
      return None
    restored = self.checkpointer.restore(abstract_like(self._checkpoint_arrays()), step)
    if restored is None:
      return None
    t = restored.trainer
    ref = t["reference"]
    if ref["fingerprint"] != self.base_fingerprint:
      raise ValueError(
          f"checkpoint step {restored.step} in {self.checkpointer.directory} was trained against "
          f"the reference {ref['path']} (fingerprint {ref['fingerprint']}), but this run's base "
          f"is {self.base_path} (fingerprint {self.base_fingerprint}); resuming would change the "
          "KL term. Point base.checkpoint at the original model or use a new workdir.")
    changed = _diff(restored.config, json.loads(to_json(self.cfg)))
    if changed:
      log.warning("Resuming step %d under a changed config: %s", restored.step,
                  "; ".join(changed[:20]))
    self.state = restored.arrays["policy"]
    self.value_state = restored.arrays["value"]
    self.sample_params = self._to_sample_layout(self.policy_params())
    self.rng = jax.random.wrap_key_data(np.asarray(t["rng"]["data"], np.uint32),
                                        impl=t["rng"]["impl"])
    self.task_stream.load_state_dict(t["tasks"])
    self.domain_sampler.load_state_dict(t["curriculum"])
    self.kl_ctl.load_state_dict(t["kl_controller"])
    self.history = {k: list(v) for k, v in t["history"].items()}
    self.step = restored.step
    log.info("Resumed from checkpoint step %d in %s.", self.step, self.checkpointer.directory)
    return self.step

  def _log_save_timings(self):
    """One ``checkpoint`` row per committed save: seconds in total and blocked."""
    if self.checkpointer is None:
      return
    for t in self.checkpointer.finished():
      if self.writer is not None:
        self.writer.write(t.step, "checkpoint", {"checkpoint/save_seconds": t.total,
                                                 "checkpoint/blocked_seconds": t.blocked})

  def policy_params(self) -> nnx.State:
    """The policy's full parameters (the base with the LoRA adapters merged in)."""
    if self.lora_cfg is None:
      return self.state.params
    return merge_lora(self.ref_params, self.state.params, self.lora_cfg)

  def export(self, directory: str) -> None:
    """The current policy as a plain parameter checkpoint (rlpt.checkpoint.save_model);
    with LoRA also the adapters alone, PEFT layout, under ``directory/adapters``."""
    params = to_host(self.policy_params())  # every process joins the gather
    if jax.process_count() > 1:
      # save_model is a single-process writer; the run checkpoints hold the
      # sharded params of multi-process runs.
      log.warning("Skipping the export to %s in a %d-process run; restore the last checkpoint "
                  "in one process to export.", directory, jax.process_count())
      return
    save_model(directory, params, self.model_cfg,
               {"step": self.step, "base": os.path.abspath(self.base_path),
                "train_config": json.loads(to_json(self.cfg))})
    if self.lora_cfg is not None:
      save_adapters(os.path.join(directory, "adapters"), to_host(self.state.params),
                    self.lora_cfg)

  def _log(self, step: int, kind: str, metrics: dict):
    if self.writer is not None:
      self.writer.write(step, kind, metrics)
    self.history[kind].append({"step": step, **metrics})

  def _report(self, base: dict, final: dict) -> dict:
    table = success_table(base, final, self.cfg.domains.ids)
    if is_primary():
      plot_eval_curves(self.history["eval"], self.cfg.domains.ids,
                       os.path.join(self.workdir, "eval_success.png"))
      with open(os.path.join(self.workdir, "summary.md"), "w") as f:
        f.write(f"# Held-out success: base vs after {self.step} RL steps\n\n{table}\n")
    return {"base": base, "final": final, "table": table}

  def close(self):
    self.pool.close()
    if self.checkpointer is not None:
      self.checkpointer.close()
    if self.writer is not None:
      self.writer.close()


def _jsonable(x):
  """numpy scalars and arrays inside ``x`` as Python numbers and lists (exact)."""
  if isinstance(x, dict):
    return {str(k): _jsonable(v) for k, v in x.items()}
  if isinstance(x, (list, tuple)):
    return [_jsonable(v) for v in x]
  if isinstance(x, (np.ndarray, np.generic)):
    return x.tolist()
  return x


def _diff(old, new, path: str = "config") -> list[str]:
  """Dotted paths where two JSON trees differ, with both values."""
  if isinstance(old, dict) and isinstance(new, dict):
    return [d for k in sorted(set(old) | set(new))
            for d in _diff(old.get(k), new.get(k), f"{path}.{k}")]
  if old != new and not (isinstance(old, float) and isinstance(new, float)
                         and math.isnan(old) and math.isnan(new)):
    return [f"{path}: {old!r} -> {new!r}"]
  return []


def _pad_width(arrays: dict, width: int, pad_id: int) -> dict:
  """Right-pads the sequence arrays of a rollout to ``width`` tokens."""
  extra = width - arrays["tokens"].shape[1]
  if not extra:
    return {}
  return {
      "tokens": np.pad(arrays["tokens"], ((0, 0), (0, extra)), constant_values=pad_id),
      "loss_mask": np.pad(arrays["loss_mask"], ((0, 0), (0, extra))),
      "old_logp": np.pad(arrays["old_logp"], ((0, 0), (0, extra))),
  }


def train(cfg: TrainConfig, workdir: str) -> dict:
  trainer = Trainer(cfg, workdir)
  try:
    return trainer.run()
  finally:
    trainer.close()
