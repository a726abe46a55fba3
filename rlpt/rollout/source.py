"""Where a run's training batches come from: `RolloutSource`.

    rollout = make_rollout_source(SourceConfig.from_train(cfg), ctx, model, policy)
    batch, metrics = rollout.next_batch(step)      # graded RolloutBatch for update ``step``
    ...                                            # the update
    metrics |= rollout.publish(step, weights)      # new weights to the sampler; curriculum

A source owns the task stream (grain), the curriculum's domain sampler, the
environment pool and its episodes, the samplers and their copy of the
policy, and the speculative draft. The synchronous source plays the batch
of update s when asked for it, with the weights of update s - 1; the
asynchronous one (`rlpt.rollout.async_source`) plays batches ahead of the
update within a staleness bound. Both give the loop one interface, and a new
rollout strategy is a subclass that overrides ``next_batch``/``publish``.
Every batch's key is ``run_key(seed, "rollout", step)``, attempt a of a
dynamic-sampling rollout ``fold_in(key, a)``.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
import zlib
from collections.abc import Callable, Sequence

import jax
import numpy as np
from flax import nnx

from rlpt.curriculum import domain_metrics, sampler_from_config
from rlpt.curriculum.signal import flat_sums, pop_sums, signal_metrics, signal_sums
from rlpt.data import TaskSampler, TaskStream
from rlpt.device import RunContext
from rlpt.rl import fill_groups, groups_with_signal
from rlpt.rollout.batch import RolloutBatch, build_sequences, encode_prompts
from rlpt.rollout.pool_api import EnvironmentPool
from rlpt.rollout.pools import make_env_pool
from rlpt.rollout.episodes import EpisodeBatch, EpisodeRunner
from rlpt.rollout.generation import RolloutSampling
from rlpt.rollout.sections import SampledModel, SourceConfig
from rlpt.sampling import SamplingParams

log = logging.getLogger(__name__)

# The engine's counters logged per batch (rlpt.engine.Engine.stats; summed over
# a batch's parts and attempts; decoded_tokens / slot_steps: the slots' use).
ENGINE_COUNTS = ("prefill_tokens", "shared_prefill_tokens", "reprefill_tokens", "refresh_tokens",
                 "decoded_tokens", "slot_steps", "released")

# Prompt buffers are padded to a multiple of this many tokens, then onto the
# 2^k / 1.5 * 2^k ladder (see bucket_length).
PROMPT_BUCKET = 16


class RolloutSource:
  """Synchronous rollout: the batch of update s is played when asked for, with
  the weights published after update s - 1.

  ``model``: the policy as the samplers see it; ``policy``: returns its
  current full parameters (training layout), which the speculative draft
  distils from. ``pool``: the environments (default: from ``cfg.env``).
  """

  def __init__(self, cfg: SourceConfig, ctx: RunContext, model: SampledModel,
               policy: Callable[[], nnx.State], pool: EnvironmentPool | None = None):
    rollout = cfg.rollout
    self.cfg, self.rl, self.speculative, self.domains = rollout, cfg.rl, cfg.speculative, cfg.domains
    self.ctx, self.tokenizer, self._policy = ctx, ctx.tokenizer, policy
    self.sampling = cfg.sampling
    # (version, weights) of the newest published policy, replaced as one value
    # (producer threads read it while the loop publishes).
    self.latest: tuple[int, object] = (0, None)
    self.samplers = RolloutSampling(cfg, ctx, model)
    # How prompts and observations become ids (rollout.chat_template): the
    # episodes', the draft's warm-up prompts' and the evaluator's displays.
    self.prompt_format = self.samplers.prompt_format
    self.pool = pool if pool is not None else make_env_pool(cfg.env, cfg.domains, rollout)
    self.episode_runner = EpisodeRunner(self.pool, self.prompt_format, rollout,
                                        self.samplers.sampler.stop_ids, PROMPT_BUCKET)
    # Training tasks: a grain iterator of per-rollout seeds; the curriculum
    # sampler picks each rollout's domains (see rlpt.data.stream).
    self.task_stream = TaskStream(ctx.seed, rollout.prompts_per_step)
    self.domain_sampler = sampler_from_config(cfg.curriculum, cfg.domains)
    # Guards the task stream and the curriculum (asynchronous producers draw
    # while the loop updates the curriculum).
    self.curriculum_lock = threading.RLock()
    # The engine plays one batch at a time: asynchronous waves, their
    # per-domain parts and the evaluator take turns on it.
    self.engine_lock = threading.Lock()
    self._served: dict[int, RolloutBatch] = {}

  # --------------------------------------------------------------------------
  # The loop's interface.

  def next_batch(self, step: int) -> tuple[RolloutBatch, dict]:
    """The graded batch that update ``step`` trains on, and the rollout's metrics
    (times, counts and rates of playing it)."""
    self._warm_draft()
    batch, metrics = self.rollout(key=self.batch_key(step))
    metrics["async/staleness"] = 0.0
    return self._serve(step, batch, metrics)

  def publish(self, step: int, weights: nnx.State) -> dict:
    """Update ``step`` is done: ``weights`` (sampling layout) go to the sampler,
    the results of the batch it trained on to the curriculum. Returns the
    step's rollout metrics (per domain, curriculum, pool, draft)."""
    with self.ctx.busy.busy():
      self.set_weights(weights, step)
    valid = self._valid(step)
    self._feed_curriculum(step, _by_domain(valid))
    return self._metrics(step, valid)

  def _feed_curriculum(self, step: int, by_domain: dict[str, list[float]]) -> None:
    """The results of update ``step``'s batch, after its weights are in place."""
    self.domain_sampler.update(by_domain)

  def set_weights(self, weights: nnx.State, step: int | None = None) -> None:
    """Gives the sampler ``weights`` (sampling layout) of update ``step``
    (default: the last published, e.g. after a restore)."""
    self.samplers.handoff(weights)
    self.latest = (self.step if step is None else step, self.samplers.params)

  @property
  def step(self) -> int:
    """The last update whose weights were published."""
    return self.latest[0]

  def weights_of(self, version: int):
    """The sampler's weights of policy ``version`` (here: the published one)."""
    newest, weights = self.latest
    if version != newest:
      raise ValueError(f"the synchronous source holds the weights of update {newest} "
                       f"only, not {version}.")
    return weights

  def play(self, tasks: list, sampling: SamplingParams, key) -> EpisodeBatch:
    """One episode per task with the published policy (the evaluator's ``play``)."""
    return self.episodes(tasks, sampling, key=key)

  def state_dict(self) -> dict:
    """The task iterator and the curriculum, as JSON."""
    return {"tasks": self.task_stream.state_dict(),
            "curriculum": self.domain_sampler.state_dict()}

  def load_state_dict(self, state: dict, step: int) -> None:
    """Resumes after update ``step`` (the sampler's weights come by ``set_weights``)."""
    self.task_stream.load_state_dict(state["tasks"])
    self.domain_sampler.load_state_dict(state["curriculum"])
    self.latest = (step, self.latest[1])

  def close(self) -> None:
    self.pool.close()

  # --------------------------------------------------------------------------
  # Playing episodes.

  def batch_key(self, step: int | None = None) -> jax.Array:
    """The key of the training batch of ``step`` (default: the next update's)."""
    return self.ctx.key("rollout", self.step + 1 if step is None else step)

  def episodes(self, tasks: list, sampling: SamplingParams, grouped: bool = False,
               version: int | None = None, key=None, bucket_rows: bool = True) -> EpisodeBatch:
    """Plays one episode per task to its end (rlpt.rollout.episodes); returns
    the conversations as host arrays, final grades, per-episode stats and the
    rollout's metrics.

    ``grouped``: tasks come in groups of ``rollout.group_size`` copies;
    ``version``: the policy to sample with (default: the published one);
    ``key``: default the next training batch's first attempt;
    ``bucket_rows``: as in ``RolloutSampling.generate``."""
    if key is None:
      key = jax.random.fold_in(self.batch_key(), 0)
    if version is None:
      version = self.latest[0]
    if self.samplers.engine is not None:
      return self._engine_episodes(tasks, sampling, version, key)
    params = self.weights_of(version)

    def generate(ids, lengths, grouped_, sub):
      return self.samplers.generate(ids, lengths, sampling, sub, grouped_, params, bucket_rows)
    return self.episode_runner.run(tasks, generate, grouped, key, jax.random.fold_in)

  def _engine_episodes(self, tasks: list, sampling: SamplingParams, version: int,
                       key) -> EpisodeBatch:
    """``episodes`` on the engine: episode i's turn t samples with
    ``fold_in(fold_in(key, i), t)`` (then its token j with ``fold_in(., j)``).
    Every round samples with ``version``'s weights, or under
    ``engine.in_flight="continue"`` with the newest published ones."""
    engine = self.samplers.engine
    fixed = (version, self.weights_of(version))
    newest = engine.cfg.in_flight == "continue"

    def step():
      v, weights = max(fixed, self.latest, key=lambda w: w[0]) if newest else fixed
      with self.ctx.busy.busy():
        return engine.step(weights, sampling, v)

    def turn_key(i: int, t: int):
      return np.asarray(jax.random.key_data(jax.random.fold_in(jax.random.fold_in(key, i), t)))
    with self.engine_lock:
      before = engine.stats.copy()
      played = self.episode_runner.run_on_engine(tasks, engine, step, turn_key)
      spent = engine.stats - before
    for name in ENGINE_COUNTS:
      played.metrics[f"engine/{name}"] = float(spent[name])
    return played

  def rollout_once(self, n_prompts: int, version: int | None = None, key=None, tasks=None,
                   bucket_rows: bool = True) -> tuple[RolloutBatch, dict]:
    """Plays ``n_prompts`` x group_size episodes and grades them (host arrays).

    ``tasks``: the prompts' tasks if already drawn (else the next of the stream).
    ``key``, ``bucket_rows``: as in ``episodes``.
    """
    g = self.cfg.group_size
    if tasks is None:
      with self.curriculum_lock:
        tasks = self.task_stream.next_tasks(self.domain_sampler)
    assert len(tasks) == n_prompts, (len(tasks), n_prompts)
    tasks_b = [task for task in tasks for _ in range(g)]
    played = self.episodes(tasks_b, self.sampling, grouped=True, version=version, key=key,
                           bucket_rows=bucket_rows)
    seq, graded, ep_stats = played.seq, played.final, played.stats
    records = tuple(dict(domain=tk.domain, seed=tk.seed, split=tk.split, reward=float(x.reward),
                         success=float(x.success), verdict=x.verdict, infra_error=x.infra_error,
                         length=int(n), turns=int(k), env_s=float(sec))
                    for tk, x, n, k, sec in zip(tasks_b, graded, ep_stats["generated"],
                                                ep_stats["turns"], ep_stats["env_s"]))
    batch = RolloutBatch(
        tokens=seq.tokens, loss_mask=seq.loss_mask, old_logp=seq.logp,
        rewards=np.array([x.reward for x in graded], np.float32),
        valid=np.array([not x.infra_error for x in graded], np.float32),
        # The last turn's completion decides truncation (overlong shaping).
        lengths=ep_stats["last_len"], stopped=ep_stats["stopped"], records=records,
        # The engine records each token's policy version: a sample's is its oldest token's.
        version=ep_stats.get("version"))
    metrics = collections.defaultdict(float, played.metrics)
    metrics["rollout/turns"] = float(np.mean(ep_stats["turns"]))
    metrics["rollout/context_overflow"] = float(np.mean(ep_stats["overflow"]))
    # Every rollout's compute and signal, kept or not (dynamic sampling's extra
    # attempts count too); turned into shares when the batch is served.
    metrics.update(flat_sums(signal_sums(records, g)))
    return batch, metrics

  def rollout(self, version: int | None = None, key=None) -> tuple[RolloutBatch, dict]:
    """One batch of graded samples (`RolloutBatch`) and its metrics.

    With ``rl.dynamic_sampling`` groups whose rewards are all equal (no
    learning signal) are dropped and further rollouts refill the batch, up to
    ``rl.max_rollouts_per_step``; if still short, uninformative groups fill
    the rest so the batch shape never changes. ``version``: the policy to
    sample with (default: the published one); ``key``: the batch's key
    (default: the next update's).
    """
    ro, rl = self.cfg, self.rl
    keys = functools.partial(jax.random.fold_in, self.batch_key() if key is None else key)
    batch, metrics = self.rollout_once(ro.prompts_per_step, version, keys(0))
    if not rl.dynamic_sampling:
      return batch, metrics
    cands = [batch]

    def informative(b):
      return int(groups_with_signal(b.rewards.reshape(-1, ro.group_size),
                                    b.valid.reshape(-1, ro.group_size)).sum())
    have = informative(batch)
    while have < ro.prompts_per_step and len(cands) < rl.max_rollouts_per_step:
      more, more_t = self.rollout_once(ro.prompts_per_step, version, keys(len(cands)))
      cands.append(more)
      for k, v in more_t.items():
        metrics[k] += v
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
    metrics["dynamic_sampling/rollouts"] = float(len(cands))
    metrics["dynamic_sampling/informative_groups"] = float(min(have, ro.prompts_per_step))
    return RolloutBatch.concat(cands, self.tokenizer.pad_id).take(rows), metrics

  def _warm_draft(self) -> None:
    """Distils the speculative draft on the policy's own samples before RL starts:
    ``speculative.warmup_steps`` updates, fresh samples every 10 (tasks from a
    stream of their own, so the run's task stream is untouched)."""
    spec, ro = self.samplers.speculative, self.cfg
    if spec is None or spec.warm:
      return
    tasks = TaskSampler(self.domains.ids, seed=self.ctx.numpy_rng("draft_tasks"))
    t = time.perf_counter()
    metrics = {}
    for i in range(self.speculative.warmup_steps):
      if i % 10 == 0:
        prompts = self.pool.reset(tasks.sample(ro.batch_size))
        ids, lengths = encode_prompts([p.text for p in prompts], self.tokenizer, ro.max_prompt_len,
                                      bucket=PROMPT_BUCKET, prompt_format=self.prompt_format)
        comp, logp, n = self.samplers.generate(ids, lengths, self.sampling,
                                          self.ctx.key("draft_warmup", i))
        seq = build_sequences(ids, lengths, comp, n, logp, self.tokenizer.pad_id)
      metrics = spec.distill(self._policy(), seq.tokens, seq.loss_mask)
    spec.warm = True
    log.info("Draft distilled in %.1fs (%d updates): %s", time.perf_counter() - t,
             self.speculative.warmup_steps, {k: round(v, 4) for k, v in metrics.items()})

  # --------------------------------------------------------------------------
  # Metrics.

  def _serve(self, step: int, batch: RolloutBatch, metrics: dict) -> tuple[RolloutBatch, dict]:
    """Hands out the batch of update ``step`` (kept until its ``publish``)."""
    self._served[step] = batch
    metrics.update(signal_metrics(pop_sums(metrics)))
    gen_tokens = sum(r["length"] for r in batch.records)
    metrics["throughput/generated_tokens_per_s"] = gen_tokens / max(metrics["time/generate"], 1e-9)
    return batch, metrics

  def _valid(self, step: int) -> list[dict]:
    """The records of the batch served for ``step`` that the environments graded."""
    batch = self._served[step]
    return [r for r in batch.records if not r["infra_error"]]

  def _metrics(self, step: int, valid: list[dict]) -> dict:
    batch = self._served.pop(step)
    records = batch.records
    out = dict(self.pool.stats())
    spec = self.samplers.speculative
    if spec is not None:
      out.update(spec.metrics())
      out.update(spec.refresh(step, self._policy(), batch.tokens, batch.loss_mask))
    with self.curriculum_lock:
      out.update(domain_metrics(valid, self.domain_sampler, tokens_key="length"))
    out["reward/mean"] = float(np.mean([r["reward"] for r in valid])) if valid else 0.0
    out["success/mean"] = float(np.mean([r["success"] for r in valid])) if valid else 0.0
    out["response_length/mean"] = float(np.mean([r["length"] for r in records]))
    out["infra_errors"] = float(len(records) - len(valid))
    # CRC-32 of the trained batch's tokens: an integer (exact in float64) that
    # tells whether two runs sampled the same tokens (resume tests compare it).
    out["rollout/token_hash"] = float(zlib.crc32(np.ascontiguousarray(batch.tokens)))
    return out


def _by_domain(records: Sequence[dict]) -> dict[str, list[float]]:
  by_domain = collections.defaultdict(list)
  for r in records:
    by_domain[r["domain"]].append(r["success"])
  return dict(by_domain)
