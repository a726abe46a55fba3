"""The single-controller RL loop.

Every step::

    task stream (grain) -> environments reset (prompts) -> sampler on device
      -> environments step (rewards) -> reference pass -> advantages
      -> jitted, sharded train step -> metrics

Every ``eval.every`` steps the policy decodes a fixed held-out task set per
domain and the success rate of each domain is logged. Every
``checkpoint.every`` steps the whole run state is checkpointed (weights,
optimizer, data-iterator, curriculum and KL-controller state, metrics
history); ``run`` resumes from the latest checkpoint and reproduces the steps
an uninterrupted run would have taken. Every random key is a pure function of
the seed, the step and its purpose (rlpt.keys), so how often the run
evaluates does not change what it trains on. ``Trainer`` is a plain
object so a notebook can drive it step by step; ``launch/train.py`` is a thin
absl wrapper around ``Trainer(cfg, workdir).run()``.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import logging
import math
import os
import threading
import time
import zlib
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from rlpt.checkpoint import RunCheckpointer, abstract_like, model_fingerprint, save_model
from rlpt.config import TrainConfig, to_json
from rlpt.curriculum import domain_metrics, sampler_from_config
from rlpt.data import Task, TaskSampler, TaskStream
from rlpt.keys import KEY_SCHEME, run_key
from rlpt.metrics import MetricsWriter, plot_eval_curves, success_table
from rlpt.models import ValueModel
from rlpt.models.lora import init_lora, lora_rl_train_step, merge_lora, save_adapters
from rlpt.pretrain import _progress, resolve_base, resolve_tokenizer
from rlpt.rl import (AdvantageInputs, compute_advantages, fill_groups, groups_with_signal,
                     kl_reward_penalty_BxT, loss_counts, make_kl_controller, overlong_filter_BxT,
                     sequence_kl_B, soft_overlong_penalty_B, truncated_B, truncated_is_weights)
from rlpt.rollout import build_sequences, encode_prompts
from rlpt.rollout.batch import RolloutBatch, merge_parts
from rlpt.evaluation import Evaluator
from rlpt.rollout.envs import check_domains, make_env_pool
from rlpt.rollout.episodes import EpisodeBatch, EpisodeRunner
from rlpt.rollout.generation import RolloutSampling
from rlpt.rollout.pipeline import AsyncRollout, BusyClock
from rlpt.runtime import (batch_sharding, check_batch, host_to_global, is_primary, jit_step,
                          make_reshard, place_params, place_train_state, replicated, to_device,
                          to_host, with_rules)
from rlpt.sampling import SamplingParams
from rlpt.sharding import make_mesh, state_shardings
from rlpt.steps import (LossCounts, RLBatch, SharedPrefix, ValueBatch, find_shared_prefix,
                        make_optimizer, rl_train_step, sequence_logprobs, sequence_values,
                        value_train_step)

log = logging.getLogger(__name__)

# Prompt buffers are padded to a multiple of this many tokens (see bucket_length).
PROMPT_BUCKET = 16


class Trainer:
  """Owns the policy, the frozen reference, the environments and the metrics of one run."""

  def __init__(self, cfg: TrainConfig, workdir: str):
    self.cfg = cfg
    self.workdir = workdir
    check_domains(cfg.domains, cfg.rollout.max_prompt_len)  # before anything is written or compiled
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
                 init_lora(params, self.lora_cfg, run_key(cfg.seed, "lora_init")))
    self.state, state_sh = place_train_state(trainable, self.optimizer, self.mesh, self.rules)
    sample_sh = state_shardings(params, self.mesh, self.sample_rules)
    # An asynchronous producer keeps sampling with older weights while the
    # update donates the training copy: its copies must not alias it.
    self._to_sample_layout = make_reshard(self.ref_sh, sample_sh,
                                          copy=cfg.rollout.max_staleness > 0)

    self.sampling = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_k, cfg.rollout.top_p)
    self.eval_sampling = SamplingParams(cfg.eval.temperature, cfg.rollout.top_k, cfg.rollout.top_p)
    self.busy = BusyClock()
    self.gen = RolloutSampling(cfg.rollout, cfg.speculative, self.graphdef, self.model_cfg,
                               self.tokenizer, self.mesh, self.sample_rules, sample_sh,
                               (self.sampling, self.eval_sampling), self.busy,
                               draft_key=run_key(cfg.seed, "draft_init"), total_steps=cfg.steps)
    self._handoff()
    # Behaviour log-probs from the policy itself (a stale or int8 sampler's
    # enter only through truncated importance weights): inside the update where
    # it allows it (TrainConfig.tis_in_step), else a scoring pass first.
    self._scoring_pass = cfg.recomputes_old_logp and not cfg.tis_in_step
    self._loss_cfg = cfg.loss_config()
    bs2 = batch_sharding(self.mesh, self.rules, 2)
    rep = replicated(self.mesh)
    self._batch_sh = RLBatch(bs2, bs2, bs2, bs2, bs2)
    self._counts_sh = LossCounts(rep, rep)

    # One compiled update and scoring pass per shared-prefix length (bucketed).
    @functools.cache
    def train_step_for(shared: SharedPrefix | None):
      if self.lora_cfg is None:
        return jit_step(rl_train_step, state_sh, (self._batch_sh, self._counts_sh, rep),
                        self.mesh, rules=self.rules, graphdef=self.graphdef,
                        optimizer=self.optimizer, loss_cfg=self._loss_cfg, sampling=self.sampling,
                        shared=shared)
      lora_step = jit_step(lora_rl_train_step, state_sh,
                           (self.ref_sh, self._batch_sh, self._counts_sh, rep), self.mesh,
                           rules=self.rules, graphdef=self.graphdef, optimizer=self.optimizer,
                           loss_cfg=self._loss_cfg, sampling=self.sampling, lora_cfg=self.lora_cfg,
                           shared=shared)
      return lambda state, *rest: lora_step(state, self.ref_params, *rest)

    @functools.cache
    def logprobs_for(shared: SharedPrefix | None):
      return jax.jit(
          with_rules(functools.partial(sequence_logprobs, self.graphdef, sampling=self.sampling,
                                       shared=shared), self.mesh, self.rules),
          in_shardings=(self.ref_sh, bs2), out_shardings=bs2)

    self._train_step_for, self._logprobs_for = train_step_for, logprobs_for
    self.kl_ctl = make_kl_controller(
        cfg.rl.kl_controller, cfg.rl.kl_beta,
        **({"target": cfg.rl.kl_target, "horizon": cfg.rl.kl_horizon}
           if cfg.rl.kl_controller == "adaptive" else {}))
    self.value_state = None
    if cfg.uses_value_model:
      # The critic's trunk starts from the base policy's decoder, its head at 0.
      vgraph, vparams = nnx.split(ValueModel(self.model_cfg,
                                                nnx.Rngs(run_key(cfg.seed, "value_init"))))
      vparams["decoder"] = params["decoder"]
      self.value_optimizer = make_optimizer(cfg.value.optim, cfg.steps)
      self.value_state, vstate_sh = place_train_state(vparams, self.value_optimizer, self.mesh,
                                                      self.rules)
      self._value_batch_sh = ValueBatch(bs2, bs2, bs2, bs2)
      self._value_step = jit_step(value_train_step, vstate_sh,
                                  (self._value_batch_sh, self._counts_sh), self.mesh,
                                  rules=self.rules, graphdef=vgraph, optimizer=self.value_optimizer,
                                  value_cfg=cfg.value_loss_config())
      self._values = jax.jit(with_rules(functools.partial(sequence_values, vgraph), self.mesh,
                                        self.rules),
                             in_shardings=(vstate_sh.params, bs2), out_shardings=bs2)

    self.pool = make_env_pool(cfg.env, cfg.domains, cfg.rollout)
    self.episode_runner = EpisodeRunner(
        self.pool, self.tokenizer, max_prompt_len=cfg.rollout.max_prompt_len,
        max_new_tokens=cfg.rollout.max_new_tokens, stop_ids=self.gen.sampler.stop_ids,
        bucket=PROMPT_BUCKET, interleave=cfg.rollout.interleave_turns)
    # Training tasks: a grain iterator of per-rollout seeds; the curriculum
    # sampler picks each rollout's domains (see rlpt.data.stream).
    self.task_stream = TaskStream(cfg.seed, cfg.rollout.prompts_per_step)
    self.domain_sampler = sampler_from_config(cfg.curriculum, cfg.domains)
    self.evaluator = Evaluator(cfg.eval, cfg.domains.ids, cfg.seed,
                               batch_size=cfg.rollout.batch_size, greedy=self.eval_sampling,
                               sampled=self.sampling, tokenizer=self.tokenizer)
    self.step = 0
    # Asynchronous rollout (rollout.staleness or domain_staleness > 0): the producer, the policy
    # versions it may sample with, each step's curriculum update (kept until
    # every wave still to be trained or checkpointed has applied it), the
    # last step whose update the producer applied, and the iterator/curriculum
    # state as of the last consumed wave (checkpoints).
    self.pipeline: AsyncRollout | None = None
    self._snapshots: dict[int, object] = {}
    self._curriculum_log: dict[int, dict] = {}
    self._curriculum_applied = 0
    self._curriculum_lock = threading.RLock()
    self._consumed_state: dict | None = None
    self._window_start: float | None = None
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

  def _handoff(self):
    """Gives the sampler the current policy, resharded to the sampling layout."""
    self.gen.handoff(self._to_sample_layout(self.policy_params()))

  # --------------------------------------------------------------------------
  # Rollout.

  def _generate(self, ids: np.ndarray, lengths: np.ndarray, sampling: SamplingParams,
                key: jax.Array, grouped: bool = False, params=None, bucket_rows: bool = True):
    """``RolloutSampling.generate``; ``key`` from ``run_key`` (there is no default stream)."""
    return self.gen.generate(ids, lengths, sampling, key, grouped, params, bucket_rows)

  def _batch_key(self, step: int | None = None) -> jax.Array:
    """The key of the training batch of ``step`` (default: the next update's)."""
    return run_key(self.cfg.seed, "rollout", self.step + 1 if step is None else step)

  def _episodes(self, tasks: list, sampling: SamplingParams, grouped: bool = False,
                params=None, key=None, bucket_rows: bool = True) -> EpisodeBatch:
    """Plays one episode per task to its end (rlpt.rollout.episodes); returns
    the conversations as host arrays, final grades, per-episode stats, timings.

    ``key``: default the next training batch's first attempt (what
    ``rollout`` would use)."""
    if key is None:
      key = jax.random.fold_in(self._batch_key(), 0)

    def generate(ids, lengths, grouped_, sub):
      return self._generate(ids, lengths, sampling, sub, grouped_, params, bucket_rows)
    return self.episode_runner.run(tasks, generate, grouped, key, jax.random.fold_in)

  def _rollout_once(self, n_prompts: int, params=None, key=None, tasks=None,
                    bucket_rows: bool = True):
    """Plays ``n_prompts`` x group_size episodes and grades them (host arrays).

    ``tasks``: the prompts' tasks if already drawn (else the next of the stream).
    ``key``: as in ``_episodes``. ``bucket_rows``: as in ``RolloutSampling.generate``.
    """
    g = self.cfg.rollout.group_size
    if tasks is None:
      with self._curriculum_lock:
        tasks = self.task_stream.next_tasks(self.domain_sampler)
    assert len(tasks) == n_prompts, (len(tasks), n_prompts)
    tasks_b = [task for task in tasks for _ in range(g)]
    seq, graded, stats, timings = self._episodes(tasks_b, self.sampling, grouped=True,
                                                 params=params, key=key, bucket_rows=bucket_rows)
    records = tuple(dict(domain=tk.domain, reward=float(x.reward), success=float(x.success),
                         verdict=x.verdict, infra_error=x.infra_error, length=int(n), turns=int(k))
                    for tk, x, n, k in zip(tasks_b, graded, stats["generated"], stats["turns"]))
    batch = RolloutBatch(
        tokens=seq.tokens, loss_mask=seq.loss_mask, old_logp=seq.logp,
        rewards=np.array([x.reward for x in graded], np.float32),
        valid=np.array([not x.infra_error for x in graded], np.float32),
        # The last turn's completion decides truncation (overlong shaping).
        lengths=stats["last_len"], stopped=stats["stopped"], records=records)
    timings = collections.defaultdict(float, timings)
    timings["rollout/turns"] = float(np.mean(stats["turns"]))
    timings["rollout/context_overflow"] = float(np.mean(stats["overflow"]))
    return batch, timings

  def rollout(self, params=None, key=None) -> tuple[RolloutBatch, dict]:
    """One batch of graded samples (`RolloutBatch`) and its timings.

    With ``rl.dynamic_sampling`` groups whose rewards are all equal (no
    learning signal) are dropped and further rollouts refill the batch, up to
    ``rl.max_rollouts_per_step``; if still short, uninformative groups fill
    the rest so the batch shape never changes. ``params``: the weights to
    sample with (the asynchronous producer passes a version's); ``key``: the
    batch's key (default: the next update's), attempt a samples with
    ``fold_in(key, a)``.
    """
    cfg, ro = self.cfg, self.cfg.rollout
    key = self._batch_key() if key is None else key
    keys = functools.partial(jax.random.fold_in, key)
    batch, timings = self._rollout_once(ro.prompts_per_step, params, keys(0))
    if not cfg.rl.dynamic_sampling:
      return batch, timings
    cands = [batch]
    def informative(b):
      return int(groups_with_signal(b.rewards.reshape(-1, ro.group_size),
                                    b.valid.reshape(-1, ro.group_size)).sum())
    have = informative(batch)
    while have < ro.prompts_per_step and len(cands) < cfg.rl.max_rollouts_per_step:
      more, more_t = self._rollout_once(ro.prompts_per_step, params, keys(len(cands)))
      cands.append(more)
      for k, v in more_t.items():
        timings[k] += v
      have += informative(more)
    # The groups to keep, as rows of all candidates in order (rollouts may
    # differ in prompt-bucket width: concat pads them to a common one).
    offsets = np.cumsum([0] + [len(c) for c in cands])
    filled = fill_groups([{"rewards": c.rewards, "valid": c.valid, "row": np.arange(o, o + len(c))}
                          for c, o in zip(cands, offsets)],
                         ro.prompts_per_step, ro.group_size, valid_key="valid")
    rows = filled.arrays["row"]
    if not filled.complete:
      # Top up with uninformative groups (advantage 0) from the first rollout.
      need = (ro.prompts_per_step - filled.num_groups) * ro.group_size
      used = set(rows.tolist())
      spare = np.array([i for i in range(len(cands[0])) if i not in used], np.int64)[:need]
      rows = np.concatenate([rows, spare]).astype(np.int64)
    timings["dynamic_sampling/rollouts"] = float(len(cands))
    timings["dynamic_sampling/informative_groups"] = float(min(have, ro.prompts_per_step))
    return RolloutBatch.concat(cands, self.tokenizer.pad_id).take(rows), timings

  # --------------------------------------------------------------------------
  # Update.

  def _shared_prefix(self, tokens_BxL: np.ndarray) -> SharedPrefix | None:
    """The prefix every GRPO group of the batch shares (its rows' common first
    tokens, at least BOS + prompt), rounded down to a multiple of 8 so that few
    lengths compile; None when sharing is off or would save nothing."""
    g, mb = self.cfg.rollout.group_size, self.cfg.rl.minibatches
    if not self.cfg.rl.shared_prefix or (len(tokens_BxL) // mb) % g:
      return None
    return find_shared_prefix(tokens_BxL, g, multiple=8)

  def _advantages(self, batch: RolloutBatch, ref_logp, values):
    """Advantages and value targets for a graded batch; applies reward shaping."""
    cfg, rl = self.cfg, self.cfg.rl
    mask = batch.loss_mask * batch.valid[:, None]
    rewards = batch.rewards.copy()
    truncated = truncated_B(batch.lengths, batch.stopped, cfg.rollout.max_new_tokens)
    if rl.overlong_filter:
      mask = overlong_filter_BxT(mask, truncated)
    if rl.overlong_buffer:
      rewards = rewards + soft_overlong_penalty_B(batch.lengths, cfg.rollout.max_new_tokens,
                                                  rl.overlong_buffer, rl.overlong_penalty)
    old_logp = jnp.asarray(batch.old_logp)
    seq_kl = sequence_kl_B(old_logp, ref_logp, jnp.asarray(mask))
    token_rewards = None
    if rl.kl_mode == "reward":
      token_rewards = kl_reward_penalty_BxT(old_logp, ref_logp, jnp.asarray(mask),
                                            self.kl_ctl.value)
    adv = compute_advantages(rl.advantage, AdvantageInputs(
        jnp.asarray(rewards), jnp.asarray(mask), cfg.rollout.group_size,
        jnp.asarray(batch.valid), values, token_rewards, rl.gamma, rl.lam,
        rl.whiten_advantages))
    return mask, adv, float(jnp.mean(seq_kl)), float(truncated.mean())

  def _warm_draft(self):
    """Distils the speculative draft on the policy's own samples before RL starts:
    ``speculative.warmup_steps`` updates, fresh samples every 10 (tasks from a
    stream of their own, so the run's task stream is untouched)."""
    spec, ro = self.cfg.speculative, self.cfg.rollout
    tasks = TaskSampler(self.cfg.domains.ids, seed=self.cfg.seed + 31)
    t = time.perf_counter()
    metrics = {}
    for i in range(spec.warmup_steps):
      if i % 10 == 0:
        prompts = self.pool.reset(tasks.sample(ro.batch_size))
        ids, lengths = encode_prompts([p.text for p in prompts], self.tokenizer, ro.max_prompt_len,
                                      bucket=PROMPT_BUCKET)
        comp, logp, n = self._generate(ids, lengths, self.sampling,
                                       run_key(self.cfg.seed, "draft_warmup", i))
        seq = build_sequences(ids, lengths, comp, n, logp, self.tokenizer.pad_id)
      metrics = self.gen.spec.distill(self.policy_params(), seq.tokens, seq.loss_mask)
    self.gen.spec.warm = True
    log.info("Draft distilled in %.1fs (%d updates): %s", time.perf_counter() - t,
             spec.warmup_steps, {k: round(v, 4) for k, v in metrics.items()})

  def _prepare_wave(self, wave: int, version: int):
    """Asynchronous producer, in wave order: curriculum updates up to ``version``,
    then the wave's tasks (all of its rollout under dynamic sampling, whose
    later draws depend on earlier results)."""
    with self._curriculum_lock:
      for s in sorted(k for k in self._curriculum_log if self._curriculum_applied < k <= version):
        self.domain_sampler.update(self._curriculum_log[s])
      self._curriculum_applied = max(self._curriculum_applied, version)
      key = self._batch_key(wave)  # wave w is trained by update w, as in a synchronous run
      done = tasks = None
      if not self.cfg.rl.dynamic_sampling:
        tasks = self.task_stream.next_tasks(self.domain_sampler)
    if self.cfg.rl.dynamic_sampling:
      # Not under the lock: the rollout takes it for each of its draws only, so
      # the consumer's update (which takes it to log the step's curriculum
      # update) does not wait for this whole rollout. Only prepares, which run
      # one at a time in wave order, change the sampler and the task stream.
      done = self.rollout(params=self._snapshots[version], key=key)
    with self._curriculum_lock:
      state = {"tasks": self.task_stream.state_dict(),
               "curriculum": self.domain_sampler.state_dict(), "curriculum_applied": version}
    return done, tasks, key, state

  def _execute_wave(self, wave: int, version: int, prepared):
    """Asynchronous producer, concurrently with other waves: generate and grade.

    With per-domain budgets (``rollout.domain_staleness``) the wave is played in
    parts, one per budget k, concurrently: part k waits for the policy of
    update ``wave - 1 - k`` and samples with it, so slower-lagging domains
    start first and fresher ones join as their weights are published.
    """
    done, tasks, key, state = prepared
    ro = self.cfg.rollout
    if done is not None:
      batch, timings = done
      return batch.with_version(version), timings, state
    parts = collections.defaultdict(list)
    for i, task in enumerate(tasks):
      parts[ro.staleness_of(task.domain)].append(i)
    if len(parts) == 1:
      v = self.pipeline.version_for(wave, next(iter(parts)))
      self.pipeline.wait_version(v)
      batch, timings = self._rollout_once(len(tasks), self._snapshots[v],
                                          jax.random.fold_in(key, 0), tasks=tasks)
      return batch.with_version(v), timings, state

    def play(k: int, idx: list[int]):
      v = self.pipeline.version_for(wave, k)
      self.pipeline.wait_version(v)
      # Padded to the whole batch: a part's size changes every step, and a
      # program per size would cost more compiling than the rows it saves.
      b, t = self._rollout_once(len(idx), self._snapshots[v], jax.random.fold_in(key, 1 + k),
                                tasks=[tasks[i] for i in idx], bucket_rows=False)
      return idx, b.with_version(v), t

    order = sorted(parts, reverse=True)  # the longest-lagging part first
    with concurrent.futures.ThreadPoolExecutor(len(order), "rlpt-wave-part") as ex:
      results = [f.result() for f in [ex.submit(play, k, parts[k]) for k in order]]
    batch, timings = merge_parts(results, ro.group_size, self.tokenizer.pad_id)
    return batch, timings, state

  def train_step(self) -> dict:
    """One full RL step (rollout, reference/value passes, updates). Returns its metrics."""
    cfg = self.cfg
    if self.gen.spec is not None and not self.gen.spec.warm:
      self._warm_draft()
    t_step = time.perf_counter()
    window_start = self._window_start or t_step
    if self.pipeline is None and cfg.rollout.max_staleness:
      self._snapshots = {self.step: self.gen.params}
      self.pipeline = AsyncRollout(self._prepare_wave, self._execute_wave,
                                   cfg.rollout.max_staleness, self.step + 1, start=False)
      self.pipeline.start()
    if self.pipeline is None:
      batch, timings = self.rollout()
      version = self.step
    else:
      wave = self.pipeline.get(self.step + 1)
      (batch, timings, self._consumed_state), version = wave.item, wave.version
      timings["async/wait"] = wave.wait_s
      timings["async/ready_waves"] = float(wave.ready)
    records, versions = batch.records, batch.version
    if versions is None:
      timings["async/staleness"] = float(self.step - version)
    else:
      # Per sample: the mean, the largest, and each domain's (budgets differ by domain).
      lag = self.step - versions
      timings["async/staleness"] = float(lag.mean())
      timings["async/staleness_max"] = float(lag.max())
      # The histogram: the share of samples k updates old, for k = 0..bound.
      for k in range(self.cfg.rollout.max_staleness + 1):
        timings[f"async/staleness_share/{k}"] = float(np.mean(lag == k))
      for d in sorted({r["domain"] for r in records}):
        timings[f"async/staleness/{d}"] = float(np.mean(
            [x for x, r in zip(lag, records) if r["domain"] == d]))
    bs2 = batch_sharding(self.mesh, self.rules, 2)
    t = time.perf_counter()
    shared = self._shared_prefix(batch.tokens)
    logprobs = self._logprobs_for(shared)
    timings["batch/shared_prefix"] = float(shared.length if shared else 0)
    tokens = host_to_global(batch.tokens, bs2)
    if self._scoring_pass:
      # Behaviour log-probs from the policy itself; the sampler's (int8)
      # log-probs only enter through the truncated importance weights.
      sampler_logp = batch.old_logp
      with self.busy.busy():
        batch = batch.replace(old_logp=to_host(logprobs(self.policy_params(), tokens)))
      is_weight, is_metrics = to_host(truncated_is_weights(
          batch.old_logp, sampler_logp, batch.loss_mask, cfg.rl.tis_cap))
      timings.update({f"rollout/{k}": float(v) for k, v in is_metrics.items()})
    ref = to_device(self.ref_params, self.ref_sh) if self.ref_on_host else self.ref_params
    with self.busy.busy():
      ref_logp = to_host(logprobs(ref, tokens))
      del ref
      values = None
      if self.value_state is not None:
        values = to_host(self._values(self.value_state.params, tokens))
    timings["time/reference"] = time.perf_counter() - t

    mask, adv, seq_kl, truncated = self._advantages(
        batch, jnp.asarray(ref_logp), None if values is None else jnp.asarray(values))
    kl_coef = self.kl_ctl.value
    self.kl_ctl.update(seq_kl, n_steps=cfg.rollout.batch_size)
    adv_BxT = np.asarray(adv.adv_BxT)
    if self._scoring_pass:
      # A positive per-token weight on the advantage scales the clipped
      # surrogate exactly as it would scale the loss.
      adv_BxT = adv_BxT * is_weight
    rl_batch = RLBatch(batch.tokens, np.asarray(mask), batch.old_logp, ref_logp, adv_BxT)
    vbatch = None
    if values is not None:
      vbatch = ValueBatch(batch.tokens, np.asarray(mask), values, np.asarray(adv.returns_BxT))

    t = time.perf_counter()
    mb = cfg.rl.minibatches
    c = loss_counts(jnp.asarray(mask))
    counts = LossCounts(jnp.float32(c.num_tokens) / mb, jnp.float32(c.num_seqs) / mb)
    # Scalars go in as global arrays too (multi-process runs need them).
    g_counts = host_to_global(counts, self._counts_sh)
    g_kl_coef = host_to_global(np.float32(kl_coef), replicated(self.mesh))
    size = cfg.rollout.batch_size // mb
    order_rng = np.random.default_rng(cfg.seed * 7919 + self.step)
    step_metrics = []  # per update, on device until the last one is done
    train_step = self._train_step_for(shared)
    for _ in range(cfg.rl.ppo_epochs):
      if mb == 1:
        perm = np.arange(size)
      elif shared is not None:  # minibatches of whole groups
        g = shared.group
        perm = (order_rng.permutation(cfg.rollout.batch_size // g)[:, None] * g
                + np.arange(g)).ravel()
      else:
        perm = order_rng.permutation(cfg.rollout.batch_size)
      for k in range(mb):
        idx = perm[k * size:(k + 1) * size]
        # Each minibatch's loss is normalised by the whole batch's counts, so
        # one epoch's gradients add up to the full-batch objective.
        mini = host_to_global(RLBatch(*(x[idx] for x in rl_batch)), self._batch_sh)
        with self.busy.busy():
          self.state, m = train_step(self.state, mini, g_counts, g_kl_coef)
          if vbatch is not None:
            vmini = host_to_global(ValueBatch(*(x[idx] for x in vbatch)), self._value_batch_sh)
            self.value_state, vm = self._value_step(self.value_state, vmini, g_counts)
            m = {**m, **vm}
        step_metrics.append(m)
    with self.busy.busy():
      step_metrics = to_host(step_metrics)  # the metrics leave the device once per step
    metric_sums: dict[str, float] = collections.defaultdict(float)
    for m in step_metrics:
      for key, v in m.items():
        metric_sums[key] += float(v)
    n_updates = len(step_metrics)
    # The sampler reads its own (sampling-layout, maybe int8) copy of the new weights.
    with self.busy.busy():
      self._handoff()
    timings["time/update"] = time.perf_counter() - t
    self.step += 1

    valid = [r for r in records if not r["infra_error"]]
    by_domain = collections.defaultdict(list)
    for r in valid:
      by_domain[r["domain"]].append(r["success"])
    if self.pipeline is None:
      self.domain_sampler.update(by_domain)
    else:
      # The producer applies it before drawing the first wave sampled with
      # this step's weights (the same point a synchronous run would).
      with self._curriculum_lock:
        self._curriculum_log[self.step] = dict(by_domain)
        # The consumed wave's curriculum state includes these; no wave needs them again.
        done = self._consumed_state["curriculum_applied"]
        for s in [s for s in self._curriculum_log if s <= done]:
          del self._curriculum_log[s]
      self._snapshots[self.step] = self.gen.params
      for v in [v for v in self._snapshots if v < self.step - cfg.rollout.max_staleness]:
        del self._snapshots[v]
      self.pipeline.publish(self.step)
    end = time.perf_counter()
    timings["time/step"] = end - t_step
    timings["accelerator/idle_fraction"] = self.busy.idle_fraction(window_start, end)
    self._window_start = end
    timings.update(self.pool.stats())
    if self.gen.spec is not None:
      timings.update(self.gen.spec.metrics())
      timings.update(self.gen.spec.refresh(self.step, self.policy_params(), batch.tokens,
                                           batch.loss_mask))

    metrics = {f"train/{k}": v / n_updates for k, v in metric_sums.items()}
    for k in ("sampler_kl", "is_weight_mean", "is_capped_fraction"):
      if f"train/{k}" in metrics:  # truncated importance weights taken in the step
        metrics[f"rollout/{k}"] = metrics.pop(f"train/{k}")
    metrics.update(timings)
    with self._curriculum_lock:
      metrics.update(domain_metrics(valid, self.domain_sampler, tokens_key="length"))
    metrics["reward/mean"] = float(np.mean([r["reward"] for r in valid])) if valid else 0.0
    metrics["success/mean"] = float(np.mean([r["success"] for r in valid])) if valid else 0.0
    metrics["response_length/mean"] = float(np.mean([r["length"] for r in records]))
    metrics["infra_errors"] = float(len(records) - len(valid))
    metrics["truncated_fraction"] = truncated
    metrics["kl/sequence"] = seq_kl
    # Per-sequence negative log-likelihood of the sampled completions (nats,
    # behaviour policy, the same rows and mean as kl/sequence): the size of
    # the terms that kl/sequence sums.
    metrics["rollout/nll"] = float(-(np.asarray(batch.old_logp) * np.asarray(mask)).sum(1).mean())
    metrics["kl/coef"] = kl_coef
    # CRC-32 of the trained batch's tokens: an integer (exact in float64) that
    # tells whether two runs sampled the same tokens (resume tests compare it).
    metrics["rollout/token_hash"] = float(zlib.crc32(np.ascontiguousarray(batch.tokens)))
    gen_tokens = sum(r["length"] for r in records)
    metrics["throughput/generated_tokens_per_s"] = gen_tokens / max(timings["time/generate"], 1e-9)
    return metrics

  # --------------------------------------------------------------------------
  # Evaluation.

  def _play(self, tasks: list, sampling: SamplingParams, key) -> EpisodeBatch:
    """One episode per task with the current policy (the evaluator's ``play``)."""
    return self._episodes(tasks, sampling, key=key)

  def evaluate(self) -> dict:
    """Held-out success per domain at the current step (`rlpt.evaluation.Evaluator.run`)."""
    return self.evaluator.run(self._play, self.step)

  def answers(self, tasks: Sequence[Task], sampled: bool = False) -> list[dict]:
    """The current policy's answers to ``tasks`` with their verdicts
    (`rlpt.evaluation.Evaluator.answers`)."""
    return self.evaluator.answers(self._play, tasks, self.step, sampled)

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
        if self.evaluator.due(self.step, cfg.steps):
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

    The minibatch order and every random key are functions of seed and step
    (rlpt.keys), so they have no state; the environments are reset every
    rollout, so neither do they.
    With asynchronous rollout the producer runs ahead: the task iterator and
    curriculum are saved as they were when the last trained wave was drawn,
    with the curriculum updates it had not applied yet; waves in flight are
    dropped and regenerated after a resume (then with the resumed weights).
    """
    if self._consumed_state is not None:
      with self._curriculum_lock:
        applied = self._consumed_state["curriculum_applied"]
        data = {"tasks": self._consumed_state["tasks"],
                "curriculum": self._consumed_state["curriculum"],
                "curriculum_applied": applied,
                "curriculum_log": {str(k): v for k, v in self._curriculum_log.items()
                                   if k > applied}}
    else:
      data = {"tasks": self.task_stream.state_dict(),
              "curriculum": self.domain_sampler.state_dict()}
    return _jsonable({
        "step": self.step,
        "keys": KEY_SCHEME,
        **data,
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
    self._handoff()
    if t.get("keys") != KEY_SCHEME:
      # Checkpoints before rlpt.keys saved a split-off RNG state instead.
      log.warning("Checkpoint step %d was written with random keys %s; this trainer derives them "
                  "as %s (rlpt.keys). It resumes with the weights, data and curriculum state, "
                  "but later steps sample differently from the run that wrote it.",
                  restored.step, t.get("keys", "split from a saved RNG state"), KEY_SCHEME)
    self.task_stream.load_state_dict(t["tasks"])
    self.domain_sampler.load_state_dict(t["curriculum"])
    self._curriculum_log = {int(k): v for k, v in t.get("curriculum_log", {}).items()}
    self._curriculum_applied = t.get("curriculum_applied", 0)
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
    save_model(directory, params, self.model_cfg,
               {"step": self.step, "base": os.path.abspath(self.base_path),
                "train_config": json.loads(to_json(self.cfg))})
    if self.lora_cfg is not None:
      adapters = to_host(self.state.params)  # every process joins the gather
      if is_primary():
        save_adapters(os.path.join(directory, "adapters"), adapters, self.lora_cfg)

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
    if self.pipeline is not None:
      self.pipeline.close()
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


def train(cfg: TrainConfig, workdir: str) -> dict:
  trainer = Trainer(cfg, workdir)
  try:
    return trainer.run()
  finally:
    trainer.close()
